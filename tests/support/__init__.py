"""What tests share: strategies, oracles, daemon drivers and feeders. No test module imports
another; they import from here."""
