"""flow package."""
