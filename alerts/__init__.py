"""Prometheus recording and alerting rules, shipped as package data."""
