"""Lightning callbacks used by the wmrl trainer."""
