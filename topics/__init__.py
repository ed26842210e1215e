"""The project's Kafka topics: their names and settings, admin, and the order feeds."""
