"""ddplaunch's Python side. ddplaunch.torch: PyTorch training that survives
a membership change in place (Elastic)."""
