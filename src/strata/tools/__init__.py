"""Command-line tools that talk to a running broker as a client (``strata tiers``).

They use the Kafka protocol (:mod:`strata.protocol`) and the broker's admin HTTP endpoint, never
the broker's code: a tool must work against a broker in another process, or on another host.
"""
