"""Dashboards as code (grafana-foundation-sdk) and the generated JSON."""
