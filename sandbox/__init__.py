"""The local Kafka sandbox: one KRaft broker started from Maven jars."""
