"""Incremental fetch sessions (KIP-227): :mod:`strata.broker.fetch_sessions.cache`."""
