"""Storage (local or S3), the one path sanitiser, and table and figure writers."""
