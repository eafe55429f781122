"""ingress package."""
