"""What both runtimes share: the training loops, the layer driver and the run records."""
