"""Layers: convolution shapes and their rules, the grids of shapes, layer files, the layers of well-known networks."""
