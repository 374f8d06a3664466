"""The static tables of a fabric, computed from the fabric model and installed on every switch
over P4Runtime."""
