"""Output formats shared by the scanner and the runtime detector."""
