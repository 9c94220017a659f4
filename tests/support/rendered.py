"""Rendered pictures, for the tests of scripts/plot_events and scripts/plot_step_rate: SVG rendered to PNG by
Debian's rsvg-convert (librsvg2-bin, which scripts/setup installs), PNG read back with the standard library
(zlib), and the ink of every text of an SVG found by rendering that text alone."""
import os
import shutil
import struct
import subprocess
import tempfile
import xml.etree.ElementTree as ET
import zlib

SVG_NS = "{http://www.w3.org/2000/svg}"
RSVG = shutil.which("rsvg-convert")
# The font attributes a <text> may inherit from the root or a group.
ET.register_namespace("", SVG_NS[1:-1])  # the default namespace, written back as it was read
FONT_ATTRS = ("font-family", "font-size", "font-weight", "text-anchor", "fill")


def read_png(path):
    """(width, height, rows): rows[y] is a bytes of width * channels; 8-bit grey, RGB, grey+alpha or RGBA,
    not interlaced (what rsvg-convert and matplotlib write). Returns channels as the 4th value."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG")
    pos, idat, width = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or interlace or colour not in (0, 2, 4, 6):
                raise ValueError(f"{path}: PNG depth {depth}, colour type {colour}, interlace {interlace}: not read")
            channels = {0: 1, 2: 3, 4: 2, 6: 4}[colour]
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if kind == 1:
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 255
        elif kind == 2:
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 255
        elif kind == 3:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif kind == 4:
            for i in range(stride):
                a = line[i - channels] if i >= channels else 0
                b, c = prev[i], prev[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows, channels


def ink_box(path):
    """The smallest (x0, y0, x1, y1) (x1, y1 exclusive) holding every pixel that is not white, or None."""
    width, height, rows, channels = read_png(path)
    xs, ys = [], []
    for y, row in enumerate(rows):
        for x in range(width):
            px = row[x * channels:(x + 1) * channels]
            if min(px[:3] if channels >= 3 else px[:1]) < 250:
                xs.append(x)
                ys.append(y)
    if not xs:
        return None
    return min(xs), min(ys), max(xs) + 1, max(ys) + 1


def render(svg_path, png_path):
    """rsvg-convert SVG -> PNG; returns the PNG's (width, height)."""
    subprocess.run([RSVG, "-o", png_path, svg_path], check=True, capture_output=True, timeout=60)
    width, height, _, _ = read_png(png_path)
    return width, height


def parse(svg_path):
    return ET.parse(svg_path).getroot()


def size_of(root):
    return float(root.get("width")), float(root.get("height"))


def texts_with_style(root):
    """[(element, {font attribute: value})]: every <text> with the font attributes it has or inherits."""
    out = []

    def walk(elem, inherited):
        style = {**inherited, **{k: elem.get(k) for k in FONT_ATTRS if elem.get(k) is not None}}
        if elem.tag == SVG_NS + "text":
            out.append((elem, style))
            return
        for child in elem:
            walk(child, style)
    walk(root, {})
    return out


def text_ink_boxes(svg_path):
    """[(text, (x0, y0, x1, y1))] in the picture's pixels: each <text> of the SVG rendered alone, on white,
    in a window around its anchor wide enough for any text of its length (so ink beyond the picture's edges
    is seen, not cut). Raises AssertionError if a text's ink touches its window's edge."""
    root = parse(svg_path)
    boxes = []
    with tempfile.TemporaryDirectory(prefix="ink_") as tmp:
        for i, (elem, style) in enumerate(texts_with_style(root)):
            size = float(style.get("font-size", "16"))
            x, y = float(elem.get("x")), float(elem.get("y"))
            text = (elem.text or "") + "".join(("" if c.tag == SVG_NS + "title" else "".join(c.itertext())) +
                                               (c.tail or "") for c in elem)  # what shows: not the <title>
            reach = len(text) * size * 1.2 + 20  # no glyph of a sans-serif font is wider than 1.2 em
            vx, vy, vw, vh = int(x - reach), int(y - 2 * size), int(2 * reach), int(3 * size)
            alone = ET.Element(elem.tag, {**style, **elem.attrib})
            alone.text = elem.text
            alone.extend(list(elem))
            svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{vw}" height="{vh}" '
                   f'viewBox="{vx} {vy} {vw} {vh}"><rect x="{vx}" y="{vy}" width="{vw}" height="{vh}" fill="white"/>'
                   f'{ET.tostring(alone, encoding="unicode")}</svg>')
            one, png = os.path.join(tmp, f"{i}.svg"), os.path.join(tmp, f"{i}.png")
            with open(one, "w") as f:
                f.write(svg)
            render(one, png)
            box = ink_box(png)
            if box is None:
                continue  # an empty text draws nothing
            if box[0] == 0 or box[1] == 0 or box[2] == vw or box[3] == vh:
                raise AssertionError(f"the ink of {text!r} reaches the edge of its window: {box} in {vw}x{vh}")
            boxes.append((text, (box[0] + vx, box[1] + vy, box[2] + vx, box[3] + vy)))
    return boxes


def overlaps(a, b):
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
