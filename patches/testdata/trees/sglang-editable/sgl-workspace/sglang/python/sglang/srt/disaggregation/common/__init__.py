# Fixture package marker for infera-exec engine-patch tests.
