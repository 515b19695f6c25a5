"""Analysis: XProf's converters turn a capture into a typed summary (and, later, findings)."""
