"""Stand-alone programs the harness runs as child processes (so each is measured alone)."""
