"""The development kit: the sample-world generator, the OpenAI-protocol test server with its
faults, and the scenarios tests and benches replay. The product never imports it."""
