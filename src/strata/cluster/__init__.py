"""Cluster state on ZooKeeper: the only package that imports kazoo (in zk.py); controller, registration and metadata cache."""  # noqa: E501
