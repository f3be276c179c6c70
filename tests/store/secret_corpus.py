"""The secret corpus: handoff text that must be refused, and legitimate text that must pass.

Every value here is a made-up example in the real format of its family. ``REFUSED`` pairs
a family with a text; ``LEGITIMATE`` is what real handoffs carry and must never be taken
for a credential. ``tests/store/test_secrets.py`` runs both through the handoff validator;
``bench/secret_detectors.py`` runs them through ``detect-secrets`` for comparison.
"""

from __future__ import annotations

REFUSED: tuple[tuple[str, str], ...] = (
    # --- passwords in prose ------------------------------------------------------------------
    ("password in prose", "the db password is Hunter2!Secret"),
    ("password in prose", "Note: the staging password was Tr0ub4dor&3, rotate it later."),
    ("password in prose", "log in as admin, password: correcthorse42!"),
    ("password in prose", "The admin pwd is Zx9#kLm2pQ for now"),
    ("password in prose", "wifi passphrase is blue-Falcon-77"),
    ("password in prose", "My password = letmein2024"),
    ("password in prose", "the root password is Pa$$word! on the test box"),
    ("password in prose", "use password='test123' for the fixture user"),
    # --- credentials assigned in config, env files and code ------------------------------------
    ("assignment", "DB_PASSWORD=s3cr3tP@ssw0rd!"),
    ("assignment", "export MYSQL_ROOT_PASSWORD='rootpw2024x'"),
    ("assignment", 'config = {"password": "hunter22pass"}'),
    ("assignment", "SECRET_KEY = 'django-insecure-8f$k2!x9q7w'"),
    ("assignment", "client_secret: 9f8e7d6c5b4a3f2e1d0c"),
    ("assignment", "auth_token=abc123def456ghi789"),
    ("assignment", "API_KEY: Qw3rTy7uI0pAsDfGh"),
    ("assignment", "passwd=Tr0ub4dor&3"),
    ("assignment", "REDIS_PASSWORD: r3d1sPass!"),
    ("assignment", "set GITHUB_TOKEN=f00dbabe1234cafe5678"),
    # --- URLs with a password --------------------------------------------------------------------
    ("url with password", "postgres://admin:SuperSecretPass123@db.example.com:5432/prod"),
    ("url with password", "DATABASE_URL=mysql://root:hunter2pw@localhost:3306/app"),
    ("url with password", "mongodb+srv://app:p4ssw0rd99@cluster0.example.mongodb.net/db"),
    ("url with password", "redis://:authpass77@cache.internal:6379/0"),
    ("url with password", "amqp://guest:guestpass1@rabbit.internal:5672/"),
    ("url with password", "git clone https://deploy:gh0stWriter9@git.example.com/repo.git"),
    # --- JWTs ------------------------------------------------------------------------------------
    ("jwt", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
            ".dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
    ("jwt", "session cookie eyJraWQiOiJrMSIsImFsZyI6IlJTMjU2In0.eyJpc3MiOiJodHRwczovL2V4YW1wbGUifQ"
            ".c2lnbmF0dXJlLXBhcnQtaGVyZQ"),
    ("jwt", "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyIn0.sig_ABCdef123"),
    # --- AWS -------------------------------------------------------------------------------------
    ("aws", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("aws", "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("aws", "aws_session_token: FwoGZXIvYXdzEJr//////////wEaDM3x"),
    ("aws", "AWS key AKIAIOSFODNN7EXAMPLE in the env"),
    ("aws", "temporary ASIAY34FZKBOKMUTVV7A from sts"),
    # --- Azure -----------------------------------------------------------------------------------
    ("azure", "DefaultEndpointsProtocol=https;AccountName=store1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ"
              "6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;EndpointSuffix=core.windows.net"),
    ("azure", "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;"
              "SharedAccessKey=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZg=="),
    ("azure", "AccountKey=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdoaWprbG1ub3A="),
    # --- Hugging Face, SendGrid, Twilio, Stripe ---------------------------------------------------
    ("hugging face", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"),
    ("hugging face", "HF_TOKEN is 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"),
    ("sendgrid", "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"),
    ("twilio", "SK0123456789abcdef0123456789abcdef"),
    ("twilio", "twilio api key SKa1b2c3d4e5f60718293a4b5c6d7e8f90 for sms"),
    ("stripe", "sk_test_4eC39HqLyjWDarjtT1zdp7dc"),
    ("stripe", "sk_live_51H8xYzAbCdEfGhIjKlMnOpQr"),
    ("stripe", "rk_test_51H8xYzAbCdEfGhIjKlMnOp"),
    ("stripe", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
    # --- OpenAI-style sk- keys, with and without capitals ------------------------------------------
    ("sk- key", "use sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXyZ0 for the calls"),
    ("sk- key", "sk-0123456789abcdef0123456789abcdef"),
    ("sk- key", "OPENAI_API_KEY=sk-abcdefghij1234567890klmnopqrst"),
    ("sk- key", "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789"),
    # --- private keys ------------------------------------------------------------------------------
    ("private key", "-----begin private key-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----end private key-----"),
    ("private key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END"),
    ("private key", "-----BEGIN RSA PRIVATE KEY-----"),
    ("private key", "-----BEGIN EC PRIVATE KEY-----"),
    ("private key", "-----BEGIN ENCRYPTED PRIVATE KEY-----"),
    ("private key", "-----BEGIN PGP PRIVATE KEY BLOCK-----"),
    # --- other vendor tokens -----------------------------------------------------------------------
    ("github", "token ghp_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"),
    ("github", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789"),
    ("gitlab", "glpat-xY9zAbCdEfGhIjKlMnOp"),
    ("slack", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp"),
    ("slack", "https://hooks.slack.com/services/T0A1B2C3D/B0A1B2C3D/AbCdEfGhIjKlMnOpQrStUvWx"),
    ("google", "AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe"),
    ("google", "client secret GOCSPX-AbCdEfGhIjKlMnOpQrStUvWxYz12"),
    ("npm", "npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"),
    ("pypi", "pypi-AgEIcHlwaS5vcmcCJDAwMDAwMDAwLTAwMDAtMDAwMC0wMDAwLTAwMDAwMDAwMDAwMAACKlszLCJ"),
    ("telegram", "bot 123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw9 for alerts"),
    ("discord", "MTA4NzY1NDMyMTA5ODc2NTQzMg.GaBcDe.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"),
    ("mailchimp", "0123456789abcdef0123456789abcdef-us12"),
    ("square", "sq0atp-AbCdEfGhIjKlMnOpQrStUv"),
    ("square", "sq0csp-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd"),
    ("databricks", "dapi0123456789abcdef0123456789abcdef"),
    ("digitalocean", "dop_v1_" + "0123456789abcdef" * 4),
    ("shopify", "shpat_0123456789abcdef0123456789abcdef"),
    ("basic auth", "curl -H 'Authorization: Basic YWRtaW46aHVudGVyMg=='"),
    ("bearer", "curl -H 'Authorization: Bearer 8f14e45fceea167a5a36dedd4bea2543'"),
)

LEGITIMATE: tuple[str, ...] = (
    # git SHAs, UUIDs, thread and job ids, SHA-256s
    "Reverted 7c73ffc and kept 1db4949 on main.",
    "commit 5fcd463a8b1e2f94d0c1a7b3e6f9d2c4b8a1e7f3",
    "HEAD is a94a8fe5ccb19ba61c4c0873d391e987982fbbd3",
    "thread 0199a5c2-1111-4000-8000-000000000001",
    "jobId 3f2504e0-4f89-41d3-9a0c-0305e82c3301 ended resumed",
    "CODEX_THREAD_ID=0199a5c2-1111-4000-8000-000000000001",
    "handoffSha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
    "The wheel's hash is 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08.",
    "md5 of the fixture: d41d8cd98f00b204e9800998ecf8427e",
    # paths
    "Edited src/auth/password_reset.py and tests/test_tokens.py",
    "The key lives in ~/.ssh/id_ed25519 (never copy it).",
    "Credentials are read from ~/.aws/credentials by boto3.",
    "/home/dev/.codex/tools/rekall/jobs/0199a5c2-1111-4000-8000-000000000001/status.json",
    "C:\\Users\\dev\\AppData\\Roaming\\secrets-manager\\config.json",
    # prose about password fields and token budgets
    "The login form's password field must be masked and have a show toggle.",
    "Add a password_hash column; the password is hashed with argon2.",
    "The password is stored in the team vault under db/prod.",
    "Token budget: keep the context under 60% of the window.",
    "The token budget is 120000 tokens; we used 45000/200000.",
    "contextTokens: 123456 of modelContextWindow 258400",
    "Rotate the API key in the dashboard; do not paste it here.",
    "Bearer tokens are configured in vault/path (not here).",
    "AKIA is the prefix AWS uses; we never store keys here.",
    "Keep ghp_ prefixed tokens out of logs.",
    "Switched from sk-learn-based-classification-models to torch.",
    "The task-force asked for a risk-assessment-of-the-whole-system.",
    "Public cert: -----BEGIN CERTIFICATE----- and -----BEGIN PUBLIC KEY----- are fine to share.",
    "Password reset emails now expire after 30 minutes.",
    "password: required, at least 12 characters",
    "The token is valid for 3600 s.",
    "api_key: see the 1Password item 'OpenAI prod'",
    "Error: password is incorrect (HTTP 401).",
    "PASSWORD_MIN_LENGTH = 12",
    "The password was reset-by-admin last week.",
    "passwords=[] in the fixture, credentials=None",
    "Fixed the secret-scanning CI job; it flags AccountKey and SharedAccessKey strings.",
    # code identifiers, placeholders and references to where a secret lives
    "validate_password(user, password) returns a PasswordResult",
    'API_KEY_ENV_VAR = "OPENAI_API_KEY"',
    'password = os.environ["DB_PASSWORD"]',
    "secret_key = get_secret_key(settings)",
    "DB_PASSWORD=<redacted>",
    "password: ${DB_PASSWORD}",
    "token: ${{ secrets.GITHUB_TOKEN }}",
    "api_key=$OPENAI_API_KEY",
    "password=*** (masked in the log)",
    "max_tokens=4096, token_budget=60000",
    "auth_token_ttl_seconds = 3600",
    "def get_access_token(self) -> str:",
    "hf_hub_download(repo_id, filename) caches the model",
    "sk_test_mode is a flag in settings.py, not a key",
    "postgres://db.example.com:5432/prod",
    "postgres://admin@db.example.com:5432/prod",
    "postgres://user:password@localhost/dev is the docker-compose default example",
    "https://github.com/openai/codex/blob/main/README.md",
    "Read SG.1 and SK.2 of the spec; section 4.3.",
    "Version 1.5.0 of detect-secrets, and rekall 0.4.2.",
    "Run `rekall schedule --handoff handoff.json` after `pytest -q -x`.",
    "eyJ is how base64 JSON starts; the JWT parser is in jwt_utils.py.",
    "The token count went from 180000 to 42000 after compaction.",
)

#: Full-size texts built to make a careless pattern backtrack (quadratic time): none is a
#: credential. ``bench/secret_detectors.py`` reports the slowest scan among them.
ADVERSARIAL: tuple[str, ...] = tuple(
    (unit * (31_000 // len(unit)))[:31_000]
    for unit in ("a_", "a.", "ab-", "x", "sk-", "eyJ", "a:", "a://b:", "postgres://", "password=", '"password": ',
                 "token is ", "-----begin ", "AKIA", "SG.", "0", " ", "hooks.slack.com/services/T")
)
