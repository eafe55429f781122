"""References measured in the same run as the router: nginx, the typical stack, helper servers."""
