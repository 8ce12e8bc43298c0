"""jaxmb.identification: identification of inertial, friction and hydraulic parameters from
logged experiment data (installed from the top-level identification/ folder)."""
