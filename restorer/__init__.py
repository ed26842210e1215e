"""Rebuild a lost store from its compacted changelog."""
