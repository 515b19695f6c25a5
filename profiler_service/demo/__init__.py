"""A small real Keras training job, for the demo and the tests."""
