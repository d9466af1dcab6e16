"""The KIP-932 share coordinator: share-partition state kept in ``__share_group_state``."""
