"""Lightning strategies and accelerators for any Lightning project (torch + lightning only)."""
