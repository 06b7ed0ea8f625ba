"""One module per output format of the simulator."""
