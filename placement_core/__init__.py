"""rlplace placement core."""
