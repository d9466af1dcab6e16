"""Partition replication: leader/follower state, fetchers, ISR, high watermark, purgatory."""
