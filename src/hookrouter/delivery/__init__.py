"""delivery package."""
