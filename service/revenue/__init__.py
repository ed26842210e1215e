"""The revenue pipeline: orders priced with the menu version that held at their time."""
