"""Event-time windows over order events: watermarks, allowed lateness, a late side output."""
