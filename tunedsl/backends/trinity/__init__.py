"""Trinity-RFT: everything that imports or runs it. The YAML writer, validation by real
Trinity, launch on Ray, and the Workflow class its runners instantiate."""
