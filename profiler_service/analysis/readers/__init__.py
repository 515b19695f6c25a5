"""The readers: XProf's tools and the capture's own events (XPlane, host events, Python stacks),
each returning its part of the Summary (parts.py assembles them)."""
