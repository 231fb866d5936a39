"""PDFs written byte by byte: files built to exhaust a renderer (small files whose pages take MuPDF hours
and gigabytes to draw), and page trees that PyMuPDF's writer would refuse to produce."""

from __future__ import annotations


def pdf_of(objects: list[bytes], version: bytes = b"1.7") -> bytes:
    """A PDF whose objects 1..n are ``objects`` (object 1 the catalog), with a correct xref table."""
    out = bytearray(b"%PDF-" + version + b"\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _stream(dictionary: bytes, data: bytes) -> bytes:
    return b"<< " + dictionary + b" /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"


def nested_forms(levels: int = 30) -> bytes:
    """A one-page PDF whose page draws form XObject 1, which draws form 2 twice, ... down ``levels``
    levels: 2 ** levels small paths from a file of a few kilobytes."""
    first_form = 5
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents 4 0 R"
        b" /Resources << /XObject << /F %d 0 R >> >> >>" % first_form,
        _stream(b"", b"/F Do"),
    ]
    for level in range(levels):
        box = b"/Type /XObject /Subtype /Form /BBox [0 0 595 842]"
        if level + 1 < levels:
            resources = b" /Resources << /XObject << /F %d 0 R >> >>" % (first_form + level + 1)
            objects.append(_stream(box + resources, b"q 0.999 0 0 0.999 0.1 0.1 cm /F Do Q q /F Do Q"))
        else:
            objects.append(_stream(box, b"0 0 m 595 842 l 0 842 m 595 0 l S"))
    return pdf_of(objects)


def many_paths(operations: int = 3_000_000) -> bytes:
    """A one-page PDF of ``operations`` path operations (an 18 MB page at 3 million)."""
    line = b"10 10 m 580 830 l S\n"
    content = line * (operations // 3)
    return pdf_of(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents 4 0 R >>",
            _stream(b"", content),
        ]
    )
