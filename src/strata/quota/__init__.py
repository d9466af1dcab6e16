"""Quotas: Kafka's windowed rates, client quotas by user and client-id, and the KIP-956 remote-tier quotas."""
