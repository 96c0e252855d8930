"""Generators and episode runners."""
