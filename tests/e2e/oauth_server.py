"""A small OAuth 2.1 authorization server for the end-to-end tests, served over https on
127.0.0.1 from a thread of the pytest process, so a test reads and changes its state directly.

It does what an MCP client's sign-in needs, as the official MCP Python SDK's client performs
it: RFC 8414 metadata (and the same document at OpenID Connect discovery's address), dynamic
client registration (RFC 7591), `/authorize` with PKCE S256 that approves at once for
`server.user`, and `/token` (authorization code and refresh token grants). Those endpoints are
the SDK's own server-side handlers (`mcp.server.auth.routes.create_auth_routes`), the ones its
example servers use, behind a provider written here: it issues RS256 JWT access tokens (RFC
9068 `at+jwt`) whose `aud` is the `resource` the client asked for (RFC 8707), whatever it is,
since the resource server's port is only known once it has started. Beside them: the key set
at `/jwks` (counted, and answering `server.jwks_status` when that is not 200) and RFC 7662
introspection at `/introspect` (HTTP Basic client authentication) for opaque tokens the tests
mint with `opaque_token`.

Tests also mint tokens directly: `token()` signs any claims with any key (published or not,
RS256, ES256 or EdDSA, with or without a `kid`), and the module-level helpers build the tokens
no honest issuer signs (`alg: none`, HS256 keyed with a public key, altered signatures).

    auth = AuthorizationServer(tmp_path).start()    # or: with AuthorizationServer(tmp) as auth:
    auth.issuer, auth.ca_file                       # for --oauth-issuer and --oauth-ca-cert
    auth.token(resource, sub="bob", scope="tally")  # a valid access token for `resource`
    auth.jwks_status = 503; auth.rotate()           # the key set down; a new signing key
    auth.stop()
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import socket
import ssl
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import jwt
import trustme
import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.routes import create_auth_routes
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthMetadata, OAuthToken

DEFAULT_SCOPE = "tally"


# ---- keys and tokens --------------------------------------------------------------------------


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class SigningKey:
    """A private key with the JWS algorithm it signs with and its key id."""

    alg: str  # "RS256", "ES256" or "EdDSA"
    kid: str
    private: Any

    @property
    def public(self):
        return self.private.public_key()

    def jwk(self) -> dict:
        """The public key as a JWK (RFC 7517), with `kid`, `alg` and `use`."""
        to_jwk = {"RS256": RSAAlgorithm, "ES256": ECAlgorithm, "EdDSA": OKPAlgorithm}[self.alg].to_jwk
        key = dict(to_jwk(self.public, as_dict=True))
        key.update(kid=self.kid, alg=self.alg, use="sig")
        return key

    def public_pem(self, pkcs1: bool = False) -> bytes:
        """The public key in PEM: SubjectPublicKeyInfo, or PKCS#1 (`BEGIN RSA PUBLIC KEY`)."""
        form = serialization.PublicFormat.PKCS1 if pkcs1 else serialization.PublicFormat.SubjectPublicKeyInfo
        return self.public.public_bytes(serialization.Encoding.PEM, form)


def new_key(alg: str = "RS256", kid: str | None = None) -> SigningKey:
    if alg == "RS256":
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif alg == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
    elif alg == "EdDSA":
        private = ed25519.Ed25519PrivateKey.generate()
    else:
        raise ValueError(f"no key for {alg}")
    return SigningKey(alg, kid or f"{alg.lower()}-{secrets.token_hex(6)}", private)


def sign(claims: dict, key: SigningKey, *, kid: str | None | bool = True, alg: str | None = None,
         headers: dict | None = None) -> str:
    """A JWS over `claims` with `key` (PyJWT). `kid`: True names the key's own id, a string
    names another, False/None leaves `kid` out. `alg` signs with another algorithm of the
    key's family (e.g. RS384)."""
    header: dict = {"typ": "at+jwt"}
    if kid is True:
        header["kid"] = key.kid
    elif kid:
        header["kid"] = kid
    header.update(headers or {})
    return jwt.encode(claims, key.private, algorithm=alg or key.alg, headers=header)


def unsigned(claims: dict, alg: str = "none", kid: str | None = None) -> str:
    """`alg: none` (or any spelling of it): a header, the claims and an empty signature."""
    header = {"alg": alg, "typ": "JWT", **({"kid": kid} if kid else {})}
    return f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}."


def hs256_keyed_with(claims: dict, secret: bytes, kid: str | None = None) -> str:
    """HS256 with `secret` as the HMAC key: with a public key's PEM as the secret this is the
    algorithm confusion attack (a verifier that takes the key from the JWKS and the algorithm
    from the token checks the HMAC with the public key, which everybody has)."""
    header = {"alg": "HS256", "typ": "JWT", **({"kid": kid} if kid else {})}
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
    mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(mac)}"


def with_altered_signature(token: str) -> str:
    """The token with one bit of its signature flipped."""
    head, body, signature = token.split(".")
    raw = bytearray(b64url_decode(signature))
    raw[len(raw) // 2] ^= 0x01
    return f"{head}.{body}.{b64url(bytes(raw))}"


def with_altered_claims(token: str, **changes) -> str:
    """The token with its claims changed and its original signature kept."""
    head, body, signature = token.split(".")
    claims = json.loads(b64url_decode(body))
    claims.update(changes)
    return f"{head}.{b64url(json.dumps(claims).encode())}.{signature}"


def claims_of(token: str) -> dict:
    """A JWT's claims, not verified (for assertions on what was issued)."""
    return json.loads(b64url_decode(token.split(".")[1]))


# ---- the provider behind the SDK's handlers -----------------------------------------------------


class _Provider:
    """`mcp.server.auth.provider.OAuthAuthorizationServerProvider` over the server's state.
    The SDK's handlers check the requests (client authentication, redirect_uri, PKCE S256,
    code expiry and ownership); this decides what is issued."""

    def __init__(self, server: "AuthorizationServer"):
        self.server = server

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.server.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.server.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        # The user approves at once: the code is theirs, for the resource and scopes asked.
        s = self.server
        scopes = params.scopes or (client.scope or DEFAULT_SCOPE).split()
        if s.next_grant is not None:
            scopes, s.next_grant = s.next_grant.split(), None
        code = secrets.token_urlsafe(32)
        s._codes[code] = AuthorizationCode(
            code=code,
            scopes=scopes,
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=s.user,
        )
        s.authorizations.append({
            "client_id": client.client_id,
            "user": s.user,
            "resource": params.resource,
            "scopes": params.scopes,
            "granted": scopes,
            "redirect_uri": str(params.redirect_uri),
            "state": params.state,
        })
        # RFC 9207: the issuer in the response (advertised in the metadata).
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state, iss=s.issuer)

    async def load_authorization_code(self, client: OAuthClientInformationFull, authorization_code: str):
        code = self.server._codes.get(authorization_code)
        return code if code and code.client_id == client.client_id else None

    async def exchange_authorization_code(self, client: OAuthClientInformationFull, authorization_code) -> OAuthToken:
        # One use only.
        self.server._codes.pop(authorization_code.code, None)
        return self._issue(client, authorization_code.subject, authorization_code.scopes, authorization_code.resource)

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str):
        found = self.server._refresh_tokens.get(refresh_token)
        return found if found and found.client_id == client.client_id else None

    async def exchange_refresh_token(self, client: OAuthClientInformationFull, refresh_token, scopes: list[str]) -> OAuthToken:
        # Refresh tokens rotate (OAuth 2.1 §4.3.1 for public clients).
        self.server._refresh_tokens.pop(refresh_token.token, None)
        self.server.refreshes += 1
        return self._issue(client, refresh_token.subject, scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        return None  # not asked: the resource server under test checks the tokens

    async def revoke_token(self, token) -> None:
        pass

    def _issue(self, client: OAuthClientInformationFull, subject: str | None, scopes: list[str], resource: str | None) -> OAuthToken:
        s = self.server
        overrides: dict = {"sub": subject or s.user, "scope": " ".join(scopes), "client_id": client.client_id}
        if resource is None:
            overrides["aud"] = None  # no resource asked: no audience (the resource server refuses it)
        access = s.token(resource or "", **{**s.extra_claims, **overrides})
        s.issued.append(access)
        refresh = "rt_" + secrets.token_urlsafe(32)
        s._refresh_tokens[refresh] = RefreshToken(
            token=refresh, client_id=client.client_id, scopes=scopes, resource=resource, subject=subject,
            expires_at=int(time.time()) + 3600,
        )
        s.minted.append(refresh)
        return OAuthToken(access_token=access, token_type="Bearer", expires_in=s.access_token_ttl,
                          scope=" ".join(scopes), refresh_token=refresh)


# ---- the server -----------------------------------------------------------------------------------


class AuthorizationServer:
    """The authorization server, its certificate authority and its state. Every attribute
    below may be read or changed by a test while the server runs."""

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        # https with a certificate authority made here: the resource server trusts it with
        # --oauth-ca-cert FILE, the test's clients with `client_ssl_context()`.
        self.ca = trustme.CA()
        leaf = self.ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file = self.workdir / "oauth-ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self._cert_file = self.workdir / "oauth-server.pem"
        self._key_file = self.workdir / "oauth-server.key"
        for i, pem in enumerate(leaf.cert_chain_pems):
            pem.write_to_path(str(self._cert_file), append=i > 0)
        leaf.private_key_pem.write_to_path(str(self._key_file))

        # Who signs in at /authorize, and what else goes into the tokens /token issues.
        self.user = "alice"
        self.extra_claims: dict = {}
        # The scope the next sign-in grants instead of the one asked (once; "" grants none, as
        # when the user unticks it on the consent screen).
        self.next_grant: str | None = None
        self.access_token_ttl = 600
        # Keys: one of each algorithm published; RS256 signs what /token issues.
        self.rsa = new_key("RS256")
        self.es = new_key("ES256")
        self.ed = new_key("EdDSA")
        self.published: list[SigningKey] = [self.rsa, self.es, self.ed]
        self.signing_key = self.rsa
        # Switches: what /jwks answers, whether the metadata is served at each address.
        self.jwks_status = 200
        self.serve_oauth_metadata = True
        self.serve_openid_configuration = True
        # The introspection endpoint's client (the resource server), HTTP Basic.
        self.introspection_client_id = "tally-resource-server"
        self.introspection_client_secret = secrets.token_urlsafe(24)
        # What happened.
        self.jwks_fetches = 0
        self.metadata_fetches = 0
        self.introspections = 0
        self.introspections_refused = 0
        self.refreshes = 0
        self.requests: list[tuple[str, str]] = []
        self.authorizations: list[dict] = []
        self.issued: list[str] = []  # access tokens /token issued
        self.minted: list[str] = []  # every token string made here (access, refresh, opaque)
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self._codes: dict[str, AuthorizationCode] = {}
        self._refresh_tokens: dict[str, RefreshToken] = {}
        self._opaque: dict[str, dict] = {}
        self.port: int | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    # -- running --

    def start(self) -> "AuthorizationServer":
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._app(),
            ssl_certfile=str(self._cert_file),
            ssl_keyfile=str(self._key_file),
            log_config=None,
            log_level="warning",
            access_log=False,
            lifespan="off",
            ws="none",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name="oauth-authorization-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test authorization server did not start")
            time.sleep(0.01)
        return self

    def stop(self):
        if self._server is not None:
            # Clients' idle keep-alive connections are not waited for.
            self._server.force_exit = True
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> "AuthorizationServer":
        return self.start() if self._server is None else self

    def __exit__(self, *exc):
        self.stop()

    # -- addresses --

    @property
    def issuer(self) -> str:
        """The issuer identifier: `https://127.0.0.1:PORT`, no trailing slash (compared as a
        string by clients, RFC 8414 §3.3, and by the resource server)."""
        return f"https://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.issuer + path

    @property
    def jwks_url(self) -> str:
        return self.url("/jwks")

    @property
    def introspection_url(self) -> str:
        return self.url("/introspect")

    def client_ssl_context(self) -> ssl.SSLContext:
        """An SSL context that trusts this server's certificate authority (for httpx2's
        `verify=`)."""
        ctx = ssl.create_default_context()
        self.ca.configure_trust(ctx)
        return ctx

    def metadata(self) -> dict:
        """The RFC 8414 authorization server metadata."""
        return {
            "issuer": self.issuer,
            "authorization_endpoint": self.url("/authorize"),
            "token_endpoint": self.url("/token"),
            "registration_endpoint": self.url("/register"),
            "jwks_uri": self.jwks_url,
            "introspection_endpoint": self.introspection_url,
            "introspection_endpoint_auth_methods_supported": ["client_secret_basic"],
            "scopes_supported": [DEFAULT_SCOPE],
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic", "none"],
            "code_challenge_methods_supported": ["S256"],
            "authorization_response_iss_parameter_supported": True,
        }

    def jwks(self) -> dict:
        return {"keys": [k.jwk() for k in self.published]}

    # -- tokens for the tests --

    def claims(self, resource: str, **overrides) -> dict:
        """An access token's claims for `resource`, valid for `access_token_ttl` seconds;
        `overrides` replace claims, and a claim given as None is left out."""
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "sub": self.user,
            "aud": resource,
            "exp": now + self.access_token_ttl,
            "iat": now,
            "nbf": now,
            "scope": DEFAULT_SCOPE,
            "client_id": "tally-e2e-direct",
            "jti": str(uuid.uuid4()),
        }
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    def token(self, resource: str, *, key: SigningKey | None = None, kid: str | None | bool = True,
              alg: str | None = None, headers: dict | None = None, **overrides) -> str:
        """A signed access token for `resource` (see `claims`), by the current signing key
        unless `key` is given (published or not)."""
        token = sign(self.claims(resource, **overrides), key or self.signing_key, kid=kid, alg=alg, headers=headers)
        self.minted.append(token)
        return token

    def opaque_token(self, resource: str, *, active: bool = True, **overrides) -> str:
        """An opaque (non-JWT) access token, known to /introspect. Its introspection answer
        is `active` with the claims of `claims(resource, **overrides)`, as given: the server
        says what it is told to (an `exp` in the past and `active: true` included)."""
        token = "opaque_" + secrets.token_urlsafe(32)
        answer = {"active": active, "token_type": "Bearer", **self.claims(resource, **overrides)}
        answer.pop("nbf", None)
        self._opaque[token] = answer if active else {"active": False}
        self.minted.append(token)
        return token

    def rotate(self, alg: str = "RS256") -> SigningKey:
        """A new signing key, published (beside the old ones) and signing from now on."""
        key = new_key(alg)
        self.published.append(key)
        self.signing_key = key
        return key

    # -- the application --

    def _app(self):
        provider = _Provider(self)
        # The metadata served below, read as the SDK's client reads it (and its issuer as the
        # URL type the SDK's routes take).
        metadata = OAuthMetadata.model_validate(self.metadata())
        assert str(metadata.issuer) == self.issuer
        sdk_routes = create_auth_routes(
            provider,
            issuer_url=metadata.issuer,
            client_registration_options=ClientRegistrationOptions(enabled=True, default_scopes=[DEFAULT_SCOPE]),
            revocation_options=RevocationOptions(enabled=False),
        )
        # The SDK's metadata document has no `jwks_uri` or introspection endpoint: served here.
        sdk_routes = [r for r in sdk_routes if r.path != "/.well-known/oauth-authorization-server"]
        routes = [
            Route("/.well-known/oauth-authorization-server", self._oauth_metadata, methods=["GET"]),
            Route("/.well-known/openid-configuration", self._openid_configuration, methods=["GET"]),
            Route("/jwks", self._jwks, methods=["GET"]),
            Route("/introspect", self._introspect, methods=["POST"]),
            *sdk_routes,
        ]
        inner = Starlette(routes=routes)

        async def app(scope, receive, send):
            if scope["type"] == "http":
                self.requests.append((scope["method"], scope["path"]))
            await inner(scope, receive, send)

        return app

    async def _oauth_metadata(self, request: Request) -> Response:
        self.metadata_fetches += 1
        if not self.serve_oauth_metadata:
            return JSONResponse({"error": "not_found"}, status_code=404)
        return JSONResponse(self.metadata())

    async def _openid_configuration(self, request: Request) -> Response:
        self.metadata_fetches += 1
        if not self.serve_openid_configuration:
            return JSONResponse({"error": "not_found"}, status_code=404)
        return JSONResponse({**self.metadata(), "subject_types_supported": ["public"],
                             "id_token_signing_alg_values_supported": ["RS256"]})

    async def _jwks(self, request: Request) -> Response:
        self.jwks_fetches += 1
        if self.jwks_status != 200:
            return JSONResponse({"error": "temporarily_unavailable"}, status_code=self.jwks_status,
                                headers={"Retry-After": "1"})
        return JSONResponse(self.jwks(), headers={"Cache-Control": "public, max-age=300"})

    async def _introspect(self, request: Request) -> Response:
        # RFC 7662 §2.1: the protected resource authenticates (here: HTTP Basic, RFC 6749 §2.3.1).
        presented = request.headers.get("authorization", "")
        authenticated = False
        if presented[:6].lower() == "basic ":
            try:
                client_id, _, secret = base64.b64decode(presented[6:]).decode("utf-8").partition(":")
                authenticated = hmac.compare_digest(unquote(client_id), self.introspection_client_id) and hmac.compare_digest(
                    unquote(secret), self.introspection_client_secret
                )
            except (ValueError, UnicodeDecodeError):
                authenticated = False
        if not authenticated:
            self.introspections_refused += 1
            return JSONResponse({"error": "invalid_client"}, status_code=401,
                                headers={"WWW-Authenticate": 'Basic realm="introspection"'})
        form = await request.form()
        token = form.get("token")
        if not isinstance(token, str):
            return JSONResponse({"error": "invalid_request", "error_description": "token is required"}, status_code=400)
        self.introspections += 1
        return JSONResponse(self._opaque.get(token, {"active": False}), headers={"Cache-Control": "no-store"})
