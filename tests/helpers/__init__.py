"""Shared test helpers: a real broker process, real clients, admin shortcuts."""
