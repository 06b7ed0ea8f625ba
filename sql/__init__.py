"""Numbered SQL migrations, shipped as package data."""
