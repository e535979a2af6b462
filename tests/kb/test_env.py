from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from kb.env import env_bool, env_choice, env_float, env_int, env_list, env_networks, env_secret, ip_networks


def test_env_bool_reads_common_spellings(monkeypatch: pytest.MonkeyPatch) -> None:
    for raw, expected in [("1", True), ("TRUE", True), ("on", True), ("0", False), ("no", False), ("", False)]:
        monkeypatch.setenv("KB_FLAG", raw)
        assert env_bool("KB_FLAG") is expected
    monkeypatch.delenv("KB_FLAG")
    assert env_bool("KB_FLAG", True) is True


def test_env_bool_rejects_nonsense_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="KB_FLAG"):
        env_bool("KB_FLAG")


def test_env_int_validates_type_and_minimum(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_N", "12")
    assert env_int("KB_N", 3) == 12
    monkeypatch.setenv("KB_N", "twelve")
    with pytest.raises(ImproperlyConfigured, match="KB_N must be an integer"):
        env_int("KB_N", 3)
    monkeypatch.setenv("KB_N", "0")
    with pytest.raises(ImproperlyConfigured, match="at least 1"):
        env_int("KB_N", 3, minimum=1)


def test_env_float_and_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_X", "0.25")
    assert env_float("KB_X", 1.0) == 0.25
    monkeypatch.setenv("KB_X", "abc")
    with pytest.raises(ImproperlyConfigured, match="KB_X"):
        env_float("KB_X", 1.0)
    monkeypatch.setenv("KB_HOSTS", " a.example , b.example,, ")
    assert env_list("KB_HOSTS", []) == ["a.example", "b.example"]


def test_env_secret_reads_a_file_and_refuses_both(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    secret = tmp_path / "key"
    secret.write_text("s3cret\n")
    monkeypatch.delenv("KB_KEY", raising=False)
    monkeypatch.setenv("KB_KEY_FILE", str(secret))
    assert env_secret("KB_KEY") == "s3cret"
    monkeypatch.setenv("KB_KEY", "other")
    with pytest.raises(ImproperlyConfigured, match="either KB_KEY or KB_KEY_FILE"):
        env_secret("KB_KEY")
    monkeypatch.delenv("KB_KEY")
    monkeypatch.setenv("KB_KEY_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfigured, match="KB_KEY_FILE: cannot read"):
        env_secret("KB_KEY")


def test_env_choice_takes_a_listed_value_or_a_dotted_path_where_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KB_MODE", raising=False)
    assert env_choice("KB_MODE", "fast", ("fast", "slow")) == "fast"
    monkeypatch.setenv("KB_MODE", " slow ")
    assert env_choice("KB_MODE", "fast", ("fast", "slow")) == "slow"
    monkeypatch.setenv("KB_MODE", "my.Mode")
    assert env_choice("KB_MODE", "fast", ("fast", "slow"), dotted_path=True) == "my.Mode"
    with pytest.raises(ImproperlyConfigured, match=r"KB_MODE must be one of fast, slow \(got 'my.Mode'\)"):
        env_choice("KB_MODE", "fast", ("fast", "slow"))
    monkeypatch.setenv("KB_MODE", "medium")
    with pytest.raises(ImproperlyConfigured, match="KB_MODE must be one of fast, slow or a dotted class path"):
        env_choice("KB_MODE", "fast", ("fast", "slow"), dotted_path=True)


def test_env_networks_parses_addresses_and_networks_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KB_NETS", raising=False)
    assert env_networks("KB_NETS") == []
    monkeypatch.setenv("KB_NETS", "10.0.0.7/8, 192.0.2.1,fd00::/8")
    assert [str(n) for n in env_networks("KB_NETS")] == ["10.0.0.0/8", "192.0.2.1/32", "fd00::/8"]
    assert ip_networks(["192.0.2.1"]) == env_networks("KB_NETS")[1:2]
    monkeypatch.setenv("KB_NETS", "10.0.0.0/8, intranet")
    with pytest.raises(ImproperlyConfigured, match="KB_NETS must list IP addresses or networks .* 'intranet'"):
        env_networks("KB_NETS")
