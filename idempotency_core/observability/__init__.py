"""What an operator watches in production (docs/operations.md)."""
