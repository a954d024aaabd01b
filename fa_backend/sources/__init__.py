"""Fetching what upstream publishes: downloads from the package index the user's pip is
configured for, checked against pins (the flavours decide what to fetch)."""
