"""Sans-IO Kafka formats: bytes in, objects out. No asyncio, no sockets, no files."""
