"""Signed releases, offline: what `kernels.verify.verify_variant` (kernels 0.17.2) reports
for an unsigned and for a tampered variant, that the policy identity docs/RELEASING.md
documents is the one GitHubWorkflowPolicy checks, and the publish refusal of unsigned
variants (`--allow-unsigned` lets rehearsals through).

verify_variant checks, in this order: bundle present (else SignatureBundleMissing),
bundle parses (SignatureBundleInvalid), metadata present, the Sigstore signature of
metadata.json against the policies (Verifier.production(): fetches Sigstore's trust root
over TUF, so it needs the network), and only then the digest of every file. A tampered
file is therefore reported as a digest failure only once the signature check has passed.
Offline, the tamper test uses a structurally valid but fake bundle (self-signed
certificate, fake signature and log entry: Bundle.from_json accepts it; a real verifier
would not) and replaces Verifier with a stand-in that accepts the signature, asserting it
was asked about the exact metadata.json bytes with our policy. What is observed is then
kernels' own digest check, DigestVerificationFailure naming the file.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
from pathlib import Path

import pytest
from release_fakes import NOARCH, metadata, variant_files  # also puts the repository root on sys.path

from tools import publish as publish_mod

kverify = pytest.importorskip("kernels.verify")
VerificationResult = kverify.VerificationResult

GITHUB_REPO = "example-org/geglu"  # stands for ${{ github.repository }} of the build workflow
SIGNER = f"https://github.com/{GITHUB_REPO}/.github/workflows/build.yml@refs/heads/main"


def make_variant(root: Path, name: str = NOARCH) -> Path:
    """A variant directory with a kernels-style digest of every file (kernels' own hasher)."""
    from kernels._rust import Digest, DigestAlgorithm

    vdir = root / name
    for rel, data in variant_files(name).items():
        (vdir / rel).parent.mkdir(parents=True, exist_ok=True)
        (vdir / rel).write_bytes(data)
    meta = metadata(name)
    meta["digest"] = {"algorithm": "sha256", "files": dict(sorted(Digest.hash_variant(DigestAlgorithm.SHA256, vdir).files.items()))}
    (vdir / "metadata.json").write_text(json.dumps(meta, indent=2) + "\n")
    return vdir


def fake_cert(*, repo: str = GITHUB_REPO, signer: str = SIGNER):
    """A self-signed leaf certificate carrying the Fulcio OIDC extensions a GitHub Actions
    keyless signature has (issuer, source repository, build signer URI)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def utf8(s: str) -> bytes:  # DER UTF8String (the "V2" extensions)
        b = s.encode()
        assert len(b) < 128
        return bytes([0x0C, len(b)]) + b

    issuer = "https://token.actions.githubusercontent.com"
    oid = x509.ObjectIdentifier
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sigstore.dev")])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([]))
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(minutes=10))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
        .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(signer)]), critical=True)
        .add_extension(x509.UnrecognizedExtension(oid("1.3.6.1.4.1.57264.1.1"), issuer.encode()), critical=False)
        .add_extension(x509.UnrecognizedExtension(oid("1.3.6.1.4.1.57264.1.8"), utf8(issuer)), critical=False)
        .add_extension(x509.UnrecognizedExtension(oid("1.3.6.1.4.1.57264.1.9"), utf8(signer)), critical=False)
        .add_extension(x509.UnrecognizedExtension(oid("1.3.6.1.4.1.57264.1.12"), utf8(f"https://github.com/{repo}")), critical=False)
    )
    return builder.sign(key, hashes.SHA256())


def fake_bundle(metadata_bytes: bytes, cert=None) -> bytes:
    """A Sigstore bundle (v0.3, hashedrekord) that parses: nothing in it is verifiable."""
    from cryptography.hazmat.primitives.serialization import Encoding

    cert = cert or fake_cert()
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return json.dumps(
        {
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": {
                "certificate": {"rawBytes": b64(cert.public_bytes(Encoding.DER))},
                "tlogEntries": [
                    {
                        "logIndex": "1",
                        "logId": {"keyId": b64(b"\0" * 32)},
                        "kindVersion": {"kind": "hashedrekord", "version": "0.0.1"},
                        "integratedTime": "1700000000",
                        "inclusionPromise": {"signedEntryTimestamp": b64(b"fake")},
                        "inclusionProof": {
                            "logIndex": "1",
                            "rootHash": b64(b"\0" * 32),
                            "treeSize": "2",
                            "hashes": [b64(b"\0" * 32)],
                            "checkpoint": {"envelope": "fake checkpoint\n"},
                        },
                        "canonicalizedBody": b64(b"{}"),
                    }
                ],
            },
            "messageSignature": {
                "messageDigest": {"algorithm": "SHA2_256", "digest": b64(hashlib.sha256(metadata_bytes).digest())},
                "signature": b64(b"not a signature"),
            },
        }
    ).encode()


class AcceptingVerifier:
    """Stand-in for sigstore's Verifier: records the call, accepts the signature."""

    calls: list = []

    @classmethod
    def production(cls):
        return cls()

    def verify_artifact(self, input_, bundle, policy):
        AcceptingVerifier.calls.append((input_, bundle, policy))


# --------------------------------------------------------------------------- kernels.verify


def test_unsigned_variant_is_signature_bundle_missing(tmp_path):
    vdir = make_variant(tmp_path)
    result = kverify.verify_variant(vdir, policies=[publish_mod.signing_policy(GITHUB_REPO)])
    assert result == VerificationResult.SignatureBundleMissing()
    # tools.publish names the same condition (and refuses it, see below).
    assert "unsigned: no metadata.json.sigstore" in publish_mod.unsigned_problem(vdir)


def test_fake_bundle_parses_and_is_not_in_the_digest(tmp_path):
    """The bundle sits beside metadata.json without changing the variant digest, and the
    fake one is structurally valid (so the tamper test reaches the later checks)."""
    from kernels._rust import Digest, DigestAlgorithm, Metadata
    from sigstore.models import Bundle

    vdir = make_variant(tmp_path)
    before = Digest.hash_variant(DigestAlgorithm.SHA256, vdir).files
    (vdir / publish_mod.BUNDLE).write_bytes(fake_bundle((vdir / "metadata.json").read_bytes()))
    assert Digest.hash_variant(DigestAlgorithm.SHA256, vdir).files == before
    Metadata.read_from_file(vdir / "metadata.json").digest.validate(Digest.hash_variant(DigestAlgorithm.SHA256, vdir))
    Bundle.from_json((vdir / publish_mod.BUNDLE).read_bytes())
    assert publish_mod.unsigned_problem(vdir) is None


def test_tampered_file_is_a_digest_failure(tmp_path, monkeypatch):
    vdir = make_variant(tmp_path)
    meta_bytes = (vdir / "metadata.json").read_bytes()
    (vdir / publish_mod.BUNDLE).write_bytes(fake_bundle(meta_bytes))
    monkeypatch.setattr(kverify, "Verifier", AcceptingVerifier)
    AcceptingVerifier.calls.clear()
    policy = publish_mod.signing_policy(GITHUB_REPO)

    # Untouched: the signature stand-in passes and kernels' digest check agrees.
    assert kverify.verify_variant(vdir, policies=[policy]) == VerificationResult.Success()
    assert AcceptingVerifier.calls[-1][0] == meta_bytes

    # One byte of a file listed in the digest changed.
    target = vdir / "layers.py"
    data = bytearray(target.read_bytes())
    data[0] ^= 0x01
    target.write_bytes(bytes(data))
    assert "layers.py" in json.loads(meta_bytes)["digest"]["files"]
    result = kverify.verify_variant(vdir, policies=[policy])
    assert isinstance(result, VerificationResult.DigestVerificationFailure), result
    from kernels._rust import DigestViolation

    assert len(result.violations) == 1 and isinstance(result.violations[0], DigestViolation.HashMismatch)
    assert result.violations[0].path == "layers.py"
    # The signature was checked first, over the untouched metadata.json, with our policy.
    assert AcceptingVerifier.calls[-1][0] == meta_bytes
    assert len(AcceptingVerifier.calls) == 2


def test_policy_names_the_build_workflow_of_the_repository():
    """The identity docs/RELEASING.md documents is what GitHubWorkflowPolicy checks on the
    signing certificate: GitHub's issuer, the source repository, build.yml at main."""
    from sigstore.errors import VerificationError

    policy = publish_mod.signing_policy(GITHUB_REPO)
    assert policy.signer_uris == [SIGNER] and policy.repo_id == GITHUB_REPO
    assert (Path(publish_mod.REPO) / publish_mod.SIGNER_WORKFLOW).is_file()
    policy.verify(fake_cert())
    for cert in (
        fake_cert(signer=SIGNER.replace("build.yml", "gpu-tests.yml")),  # another workflow
        fake_cert(signer=SIGNER.replace("refs/heads/main", "refs/heads/feature")),  # a branch
        fake_cert(repo="someone/fork"),  # another repository
    ):
        with pytest.raises(VerificationError):
            policy.verify(cert)
    # A tag release is checked with its ref.
    tag = SIGNER.replace("refs/heads/main", "refs/tags/v1.0.0")
    publish_mod.signing_policy(GITHUB_REPO, "refs/tags/v1.0.0").verify(fake_cert(signer=tag))


# --------------------------------------------------------------------------- tools.publish


def run_publish(capsys, *args) -> tuple[int, str]:
    rc = publish_mod.main([*map(str, args)])
    out = capsys.readouterr()
    return rc, out.out + out.err


def test_publish_refuses_unsigned_variants(tmp_path, capsys):
    build = tmp_path / "build"
    make_variant(build)
    mirror = tmp_path / "hub"
    base = ["--build", build, "--mirror", mirror, "--create-repo"]

    for extra in (["--dry-run"], []):
        rc, out = run_publish(capsys, *base, *extra)
        assert rc == 1, out
        assert f"[unverified] {NOARCH}: unsigned: no metadata.json.sigstore" in out
        assert f"[publish]   {NOARCH}: FAILED; UNSIGNED" in out
    assert not mirror.exists()

    # --allow-unsigned lets a rehearsal through, saying users cannot verify it.
    rc, out = run_publish(capsys, *base, "--allow-unsigned")
    assert rc == 0, out
    assert "WARNING: --allow-unsigned" in out and "cannot verify" in out
    assert (mirror / "kernels--org--geglu" / "refs" / "v1").is_file()


def test_publish_ships_the_bundle_of_a_signed_variant(tmp_path, capsys):
    build = tmp_path / "build"
    vdir = make_variant(build)
    bundle = fake_bundle((vdir / "metadata.json").read_bytes())
    (vdir / publish_mod.BUNDLE).write_bytes(bundle)
    mirror = tmp_path / "hub"
    rc, out = run_publish(capsys, "--build", build, "--mirror", mirror, "--create-repo")
    assert rc == 0, out
    assert f"{NOARCH}: verified (digest, ABI, metadata); signed (metadata.json.sigstore)" in out
    assert f"add      build/{NOARCH}/metadata.json.sigstore" in out
    repo = mirror / "kernels--org--geglu"
    head = (repo / "refs" / "v1").read_text()
    assert (repo / "snapshots" / head / "build" / NOARCH / publish_mod.BUNDLE).read_bytes() == bundle
    # Publishing it again keeps the same bundle.
    rc, out = run_publish(capsys, "--build", build, "--mirror", mirror)
    assert rc == 0 and "nothing to do" in out, out


def test_help_says_unsigned_variants_cannot_be_verified(capsys):
    with pytest.raises(SystemExit):
        publish_mod.parse_args(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--allow-unsigned" in help_text and "cannot be verified by users" in help_text
