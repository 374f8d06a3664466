"""Documents generated from the code: the README's fabric picture and the CLI reference."""
