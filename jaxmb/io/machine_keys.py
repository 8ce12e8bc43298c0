"""Every key of a machine file (`jaxmb.io.machine`) and what it means: the tables the loader
checks a file's keys against (an unknown key is refused by name) and the reference
(``docs/reference.md``, `scripts/make_reference.py`) is generated from, so that the two cannot
drift. SI units unless a key says otherwise."""

__all__ = ["CYLINDER", "TABLES", "VALVE"]

# [table] -> {key: meaning}; None: a table of named sub-tables (CYLINDER, VALVE)
TABLES: dict[str, dict[str, str] | None] = {
    "machine": {
        "name": "the machine's name (required): names its parameter files and reports",
        "urdf": "the URDF of the booms (required), relative to the machine file",
        "gravity": "gravity in the URDF's root frame, m/s^2 (default [0, 0, -9.81])",
        "version": "the file's own version, free text (optional)",
        "description": "free text (optional)",
    },
    "hydraulics": {
        "supply_pressure": "supply pressure, Pa (required): what closed loops, studies and "
        "tuning take",
        "return_pressure": "return (tank) pressure, Pa (required)",
        "bulk_modulus": "effective bulk modulus of the oil, Pa (required); a cylinder may "
        "override it",
        "supply_from_log": "true: replays and identification take the supply pressure from "
        "each log's signal p_s (a load-sensing pump), interpolated between samples "
        "(default false)",
        "return_from_log": "true: the return pressure likewise, signal p_r (default false)",
    },
    "payload": {
        "mass": "the payload's mass, kg (required; a log's sidecar conditions.payload_kg "
        "overrides it)",
        "link": "the URDF link that carries it (required; a moving link, not the root)",
        "com": "its centre of mass in that link's frame, m (default [0, 0, 0])",
    },
    "cylinders": None,
    "valves": None,
    "log": {
        "columns": "the log's column for each plant signal: { plant name = column }",
        "units": "non-SI units of the log's columns: { plant name = unit } (bar, deg, mm, ...)",
        "offsets": "known sensor offsets, what a sensor reads when its signal is 0, in the "
        "column's unit; subtracted from every log of the machine on reading",
    },
    "task": {
        "waypoints": "per coordinate, the waypoints of the task `jaxmb simulate` runs VDC on "
        "(rad or m): rest-to-rest quintics between them",
        "segment_time": "seconds per segment between waypoints",
        "hold": "seconds at the last waypoint (default 0)",
    },
    "vdc": {
        "lam": "VDC velocity gain: a number, or one per coordinate; > 0 (default 10)",
        "k_v": "VDC gain k_v (a number); > 0 (default 50)",
        "k_0": "VDC gain k_0 (a number); > 0 (default 1)",
        "k_x": "VDC pressure-loop gain: a number, or one per cylinder; > 0 (default 3e-2)",
        "k_f": "VDC force-feedback gain: a number, or one per cylinder; > 0 (default 1e-7)",
        "rate": "the controller's sampling rate, Hz (default 1000; zero-order hold), or "
        '"continuous" for the papers\' continuous-time loop',
    },
}

# [cylinders.<name>]: the name names the cylinder's signals (p_a_<name>, p_b_<name>)
CYLINDER: dict[str, str] = {
    "base": "the base pin (tube side): { link = URDF link, point = [x, y, z] in its frame, m }",
    "rod": "the rod pin, likewise",
    "l_min": "pin distance at zero stroke, m",
    "stroke": "stroke, m",
    "bore": "piston diameter, m (or area_a and area_b)",
    "rod_diameter": "rod diameter, m (with bore)",
    "area_a": "piston-side area, m^2 (instead of bore)",
    "area_b": "rod-side area, m^2 (instead of rod_diameter)",
    "dead_volume": "dead volume of each chamber, m^3 (or dead_volume_a and dead_volume_b)",
    "dead_volume_a": "dead volume of the piston-side chamber, m^3",
    "dead_volume_b": "dead volume of the rod-side chamber, m^3",
    "bulk_modulus": "this cylinder's effective bulk modulus, Pa (default the [hydraulics] one)",
    "leakage_internal": "internal leakage coefficient a -> b, m^3/(s Pa) (default 0)",
    "leakage_external": "external leakage coefficient of each chamber to tank, m^3/(s Pa) "
    "(default 0)",
    "friction": '{ model = "stribeck" (F_c, F_s, v_s, sigma, v_eps) | "lugre" (sigma0, sigma1, '
    'sigma2, F_c, F_s, v_s, optional v_eps) | "viscous" (sigma) | "none" }, N, m/s, N s/m '
    "(default none)",
    "tube": "the tube as a body: { mass kg, com m from the base pin, length m, optional "
    "axial_inertia kg m^2 (default 0.01) } (default massless)",
    "piston": "the rod and piston as a body, likewise, com from the rod pin",
    "pin_axis": "the pins' axis in the base link's frame, for a cylinder with a tube or "
    "piston body (optional; without it, from the geometry: jaxmb.actuators.cylinder_loops)",
    "end_stop_stiffness": "stiffness of the stroke's end stops, N/m (default 1e8)",
    "end_stop_damping": "damping of the end stops, N s/m (default 2e6)",
}

# [valves.<name>]
VALVE: dict[str, str] = {
    "cylinder": "the cylinder it drives",
    "rated_flow": "flow per metering edge at the rated pressure drop and command, m^3/s (or "
    "the four edge coefficients)",
    "rated_pressure_drop": "the pressure drop the rated flow is given at, Pa (with rated_flow)",
    "rated_command": "the command the rated flow is given at (with rated_flow; default "
    "command_max)",
    "c_pa": "edge coefficient P -> A, m^3 s^-1 (command unit)^-1 Pa^-1/2 (instead of rated_flow)",
    "c_an": "edge coefficient A -> T, likewise",
    "c_pb": "edge coefficient P -> B, likewise",
    "c_bn": "edge coefficient B -> T, likewise",
    "command_max": "the command's saturation (default 10)",
    "command_unit": 'the command\'s unit (default "V")',
    "deadband": "spool overlap in command units, 0 <= deadband < command_max (default 0): the "
    "edges meter sign(u) max(|u| - deadband, 0)",
    "delay": "command transport delay, s (default 0)",
    "spool": '{ model = "none" | "first" (time_constant s) | "second" (frequency rad/s, '
    "damping) } (default none)",
    "dp_width": "width of the orifice law's square-root regularisation, Pa (default 1e3)",
}
