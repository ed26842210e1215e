"""How each system under test is started and measured: brewstream, the plain consumer, Quix."""
