"""Capture: the controller bounds captures; capturers take them (remote gRPC or in-process)."""
