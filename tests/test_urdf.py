"""URDF import: supported elements and clear errors for the rest."""

import numpy as np
import pytest

import jaxmb

LINK = (
    '<link name="{n}"><inertial><origin xyz="0.1 0 0" rpy="0.3 0.2 0.1"/><mass value="2"/>'
    '<inertia ixx="0.1" ixy="0" ixz="0" iyy="0.2" iyz="0" izz="0.25"/></inertial></link>'
)


def robot(joints, links=("base", "a", "b")):
    body = "".join(LINK.format(n=n) if n != "base" else '<link name="base"/>' for n in links)
    return f'<robot name="r">{body}{joints}</robot>'


def joint(name, jtype, parent, child, extra='<axis xyz="0 0 1"/>'):
    if jtype in ("revolute", "prismatic"):  # urdfdom requires limits on these
        extra += '<limit lower="-1" upper="1" effort="10" velocity="1"/>'
    return (
        f'<joint name="{name}" type="{jtype}"><parent link="{parent}"/><child link="{child}"/>'
        f'<origin xyz="0 0 0.5" rpy="0 0.4 0"/>{extra}</joint>'
    )


def test_loads_revolute_continuous_prismatic_fixed(tmp_path):
    xml = robot(
        joint("j1", "continuous", "base", "a")
        + joint("j2", "prismatic", "a", "b")
        + joint("tool", "fixed", "b", "c", ""),
        links=("base", "a", "b", "c"),
    )
    path = tmp_path / "r.urdf"
    path.write_text(xml)
    model = jaxmb.load_urdf(path)
    assert model.coordinate_names == ("j1", "j2")
    assert [f.joint for f in model.frames] == ["revolute", "prismatic", "fixed"]
    # c hangs from b by a fixed joint: merged into b's body, as Pinocchio does
    assert model.body_names == ("a", "b") and "a_com" in model.frame_names
    np.testing.assert_allclose(model.body("b").mass, 4.0)
    # the rotated inertial frame: I = R I' R^T, with I' = diag(0.1, 0.2, 0.25)
    I = np.asarray(model.body("a").inertia)
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(I)), [0.1, 0.2, 0.25], atol=1e-14)
    assert abs(I[0, 1]) > 1e-3
    np.testing.assert_allclose(model.gravity, [0, 0, -9.81])


def test_links_without_inertial_are_massless_frames():
    xml = (
        '<robot name="r"><link name="base"/><link name="a"/>'
        + LINK.format(n="b")
        + joint("j1", "revolute", "base", "a")
        + joint("j2", "revolute", "a", "b")
        + "</robot>"
    )
    model = jaxmb.load_urdf(xml)
    assert model.body_names == ("b",) and model.n == 2


@pytest.mark.parametrize(
    "xml, message",
    [
        ("<robot><link name='a'></robot>", "malformed XML"),
        (
            robot(joint("j1", "floating", "base", "a", ""), ("base", "a")),
            "joint 'j1' has unsupported type 'floating'",
        ),
        (
            robot(joint("j1", "planar", "base", "a"), ("base", "a")),
            "joint 'j1' has unsupported type 'planar'",
        ),
        (
            robot(joint("j1", "revolute", "base", "a") + joint("j2", "revolute", "b", "a")),
            "link 'a' is the child of joints 'j1' and 'j2'",
        ),
        (robot(joint("j1", "revolute", "base", "zz")), "joint 'j1' names unknown link 'zz'"),
        (
            robot(joint("j1", "revolute", "base", "a", '<axis xyz="0 0 0"/>'), ("base", "a")),
            "joint 'j1'.*axis",
        ),
        (
            '<robot name="r"><link name="base"/><link name="a"><inertial><mass value="-1"/>'
            '<inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="1"/></inertial></link>'
            + joint("j1", "revolute", "base", "a")
            + "</robot>",
            "link 'a' <inertial>.*mass",
        ),
        ("<model/>", "root element must be <robot>"),
    ],
)
def test_errors_name_the_element(xml, message):
    with pytest.raises(ValueError, match=message):
        jaxmb.load_urdf(xml)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        jaxmb.load_urdf(tmp_path / "nope.urdf")
