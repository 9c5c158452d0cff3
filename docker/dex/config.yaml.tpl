# Dex, the test OIDC provider of the `sso` profile (compose.yaml). The image's entrypoint
# renders this template (gomplate) before Dex reads it: PUBLIC_HOST from the environment,
# the client secret from the same secret file the gateway reads. Not for production: users
# live in this file and keys in memory.
issuer: http://{{ .Env.PUBLIC_HOST }}:5556/dex

storage:
  type: memory

web:
  http: 0.0.0.0:5556

telemetry:
  http: 0.0.0.0:5558

oauth2:
  responseTypes: [code]
  skipApprovalScreen: true

staticClients:
  - id: enclave
    name: Enclave
    secret: '{{ file.Read "/run/secrets/oidc_client_secret" | strings.TrimSpace }}'
    redirectURIs:
      - https://{{ .Env.PUBLIC_HOST }}/auth/callback

enablePasswordDB: true
staticPasswords:
  # Sign in as demo@enclave.test with the password enclave-demo (a bcrypt hash below).
  - email: demo@enclave.test
    hash: "$2a$14$/oOy2cJZDeQrQ..bV/6sV.qK0eK1DIhKjc/AcpQOImNTN.l2nHOki"
    username: demo
    userID: 6b1a3c9e-2f4d-4c1e-9a53-7d0e8b2f4a61
