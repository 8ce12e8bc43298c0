"""URDF export (`jaxmb.io.urdf_write`): what jaxmb writes, Pinocchio (an independent C++
reader and implementation) loads to the same dynamics, and jaxmb loads back to the same model.

Issue 31, point 3: the identified model as a URDF. The whole-CLI checks (a URDF robot, the
KR300's main job, the closed-chain arm and base-parameter fits that write none) sit with their
`jaxmb identify` runs in test_identify_rigid.py and test_identify_main.py."""

import xml.etree.ElementTree as ET

import numpy as np
import pytest
from helpers import file_armature, mass_matrix, pinocchio_agrees

import jaxmb
from jaxmb.io.urdf_write import DRAKE_NS, model_urdf, rpy_from_rotation, with_parameters
from jaxmb.io.urdf_xml import _rpy_matrix
from jaxmb.models import random_tree_urdf
from jaxmb.models.catalog import CATALOG
from jaxmb.models.kr300 import kr300, kr300_drives
from jaxmb.multibody.model import replace_body


def _perturbed(model, seed):
    """``model`` with every body's mass, COM and inertia changed (scaled and turned: still
    physical)."""
    rng = np.random.default_rng(seed)
    for b in model.bodies:
        R = _rpy_matrix(rng.uniform(-0.5, 0.5, 3))
        model = replace_body(model, b.name, mass=float(b.mass) * rng.uniform(0.7, 1.3),
                             com=np.asarray(b.com) + rng.normal(0, 0.05, 3),
                             inertia=rng.uniform(0.7, 1.3) * R @ np.asarray(b.inertia) @ R.T)  # fmt: skip
    return model


@pytest.mark.parametrize(
    "R",
    [np.eye(3), _rpy_matrix(np.array([0.3, -1.2, 2.9])), _rpy_matrix(np.array([0.7, np.pi / 2, 0])),
     _rpy_matrix(np.array([-2.0, -np.pi / 2, 0.4])), _rpy_matrix(np.array([np.pi, 0.0, 0.0]))],
    ids=["identity", "general", "pitch+90", "pitch-90", "roll180"],
)  # fmt: skip
def test_rpy_round_trip_including_gimbal_lock(R):
    np.testing.assert_allclose(_rpy_matrix(rpy_from_rotation(R)), R, atol=1e-15)


def test_kr300_written_as_a_urdf_is_the_same_robot():
    """The KR300 is built in code (DH frames, fixed link frames, a tool frame at pitch -90 deg);
    its URDF loads into Pinocchio and back into jaxmb with the same dynamics."""
    model = kr300()
    d = kr300_drives()
    xml = model_urdf(model, name="kr300", limits=CATALOG["kr300"].limits())
    pm = pinocchio_agrees(xml, model)
    np.testing.assert_allclose(pm.lowerPositionLimit, d.q_min, rtol=1e-15)
    back = jaxmb.load_urdf(xml)
    assert back.coordinate_names == model.coordinate_names
    q = np.linspace(-0.5, 0.5, 6)
    np.testing.assert_allclose(mass_matrix(back, q), mass_matrix(model, q), rtol=1e-12)
    # without limits a revolute joint is continuous (a URDF has no unlimited revolute joint)
    assert 'type="continuous"' in model_urdf(model) and 'type="revolute"' not in model_urdf(model)


def test_identified_parameters_into_a_copy_of_a_urdf_with_welded_links():
    """`with_parameters` on a branching tree with fixed joints and prismatic joints: the bodies
    (each the composite of the links welded to a moving link) and the joint terms land where
    Pinocchio reads them; the rest of the file is kept."""
    xml = random_tree_urdf(12, 2, fixed_every=3, prismatic_every=4, branching=True)
    assert 'type="fixed"' in xml
    model = jaxmb.load_urdf(xml)
    new = _perturbed(model, 5)
    names = model.coordinate_names
    joint = {c: {"viscous": 0.1 * (i + 1), "coulomb": 0.2 * (i + 1), "armature": 0.03 * (i + 1),
                 "offset": -0.5} for i, c in enumerate(names)}  # fmt: skip
    gear = {names[0]: 100.0}
    text = with_parameters(xml, new, joint, gear_ratio=gear, notes={"source": "a test"})
    armature = np.array([joint[c]["armature"] for c in names])
    pm = pinocchio_agrees(text, new, armature)
    order = [pm.names[i] for i in range(1, pm.njoints)]
    np.testing.assert_allclose(pm.damping, [joint[c]["viscous"] for c in order], rtol=1e-15)
    np.testing.assert_allclose(pm.friction, [joint[c]["coulomb"] for c in order], rtol=1e-15)
    # jaxmb reads it back as the identified model
    back = jaxmb.load_urdf(text)
    q = np.random.default_rng(1).uniform(-1, 1, model.n)
    np.testing.assert_allclose(mass_matrix(back, q), mass_matrix(new, q), rtol=1e-12, atol=1e-13)
    # the armature as rotor inertia and gear ratio (checked above): the given ratio, else 1
    root = ET.fromstring(text)
    for t in root.findall("transmission"):
        G = t.find("actuator").find(f"{{{DRAKE_NS}}}gear_ratio").get("value")
        assert float(G) == gear.get(t.find("joint").get("name"), 1.0)
    # terms without a URDF place, and the notes, are comments; the source's limits are kept
    assert text.count("offset = -0.5") == len(names) and "source: a test" in text
    src, out = ET.fromstring(xml), root
    for j in src.findall("joint"):
        lim = j.find("limit")
        if lim is not None:
            (k,) = [o for o in out.findall("joint") if o.get("name") == j.get("name")]
            assert k.find("limit").attrib == lim.attrib


def test_kr300_identified_through_its_own_urdf():
    """The route a built-in model takes: `model_urdf` of the nominal model, then
    `with_parameters` of the identified one (bodies on the fixed DH link frames)."""
    model = kr300()
    new = _perturbed(model, 7)
    armature = np.linspace(5.0, 0.5, 6)
    joint = {
        c: {"armature": a, "viscous": 10.0}
        for c, a in zip(model.coordinate_names, armature, strict=True)
    }
    text = with_parameters(
        model_urdf(model, limits=CATALOG["kr300"].limits()), new, joint, gear_ratio={"q1": 1798 / 7}
    )
    pinocchio_agrees(text, new, armature, seed=3)


def test_refusals():
    from jaxmb.models import series_parallel_3dof

    with pytest.raises(ValueError, match="closed kinematic loops"):
        model_urdf(series_parallel_3dof())
    model = jaxmb.load_urdf(random_tree_urdf(3, 0))
    with pytest.raises(ValueError, match="prismatic joint .* needs limits"):
        model_urdf(model)
    other = kr300()
    with pytest.raises(ValueError, match="body 'link1' sits on frame 'L1', which the URDF has no"):
        with_parameters(random_tree_urdf(3, 0), other)
    with pytest.raises(ValueError, match="the URDF has no joint 'nope'"):
        with_parameters(random_tree_urdf(3, 0), model, {"nope": {"viscous": 1.0}})


def test_an_existing_transmission_keeps_one_gear_ratio():
    """A URDF whose joint has a transmission with ``mechanicalReduction`` 50: without a gear
    ratio given, the rotor inertia is ``armature / 50^2``; with 100 given, both the Drake ratio
    and ``mechanicalReduction`` say 100."""
    xml = random_tree_urdf(3, 0, prismatic_every=0)
    model = jaxmb.load_urdf(xml)
    c = model.coordinate_names[0]
    trans = (f'<transmission name="t"><type>transmission_interface/SimpleTransmission</type>'
             f'<joint name="{c}"/><actuator name="m"><mechanicalReduction>50</mechanicalReduction>'
             "</actuator></transmission></robot>")  # fmt: skip
    xml = xml.replace("</robot>", trans)
    joint = {c: {"armature": 5.0}}
    for given, G in ((None, 50.0), ({c: 100.0}, 100.0)):
        text = with_parameters(xml, model, joint, gear_ratio=given)
        np.testing.assert_allclose(file_armature(text, [c]), [5.0], rtol=1e-15)
        act = ET.fromstring(text).find("transmission").find("actuator")
        assert float(act.find(f"{{{DRAKE_NS}}}gear_ratio").get("value")) == G
        assert float(act.find("mechanicalReduction").text) == G
    # the older format: the reduction directly in the transmission, read and kept as the one
    old = xml.replace("<actuator name=\"m\"><mechanicalReduction>50</mechanicalReduction></actuator>",
                      "<actuator name=\"m\"/><mechanicalReduction>40</mechanicalReduction>")  # fmt: skip
    trans = ET.fromstring(with_parameters(old, model, joint)).find("transmission")
    assert [r.text for r in trans.iter("mechanicalReduction")] == ["40.0"]
    J = float(trans.find("actuator").find(f"{{{DRAKE_NS}}}rotor_inertia").get("value"))
    assert J == pytest.approx(5.0 / 40**2, rel=1e-15)
    with pytest.raises(ValueError, match=f"the transmission of joint '{c}' has gear ratio '0'"):
        with_parameters(old.replace(">40<", ">0<"), model, joint)
