"""The asyncio Kafka broker: server, connections, dispatch and one handler module per API."""
