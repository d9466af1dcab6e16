"""Kafka's security model without I/O: TLS contexts from Kafka's keys, principals, SASL mechanisms,
SCRAM credentials and the ACL authorizer's semantics. The broker's wire layer drives them per
connection; ZooKeeper storage of credentials and ACLs lives in ``strata.cluster``."""
