"""Which address an executor's node binds and advertises, and the network settings from every surface
(TrainingSettings, CLI flags, config file, spark.sparkdbn.* conf): pure functions, no Spark."""

from __future__ import annotations

import dataclasses
import json
import socket

import pytest

from node import SparkConfError, TrainingError, TrainingSettings
from node._contract import CONTRACT_VERSION, NodeConfig, decode, encode
from node.executor import _network as network
from node.executor._network import (check_ports_for_nodes, choose_node_address, driver_address, is_local_master,
                                    local_master_threads, route_address)
from node.driver._progress import summary_line
from node.watch._reachability import ReachabilityWatch, merges_by_node
from node.driver._spark_conf import apply_spark_conf, explicit_fields, settings_from_spark_conf
from node.cli import build_parser, load_config
from node.cli._train_inputs import training_settings


def test_a_local_master_binds_and_advertises_loopback_whatever_spark_local_ip_says():
    address = choose_node_address(local_master=True, driver_host="10.1.2.3", environ={"SPARK_LOCAL_IP": "10.9.9.9"})
    assert (address.bind_host, address.advertise_host) == ("127.0.0.1", "127.0.0.1")
    assert is_local_master("local[2,4]") and is_local_master("local-cluster[2,1,1024]") and is_local_master(None)
    assert not is_local_master("spark://10.0.0.2:7077") and not is_local_master("yarn")


def test_on_a_cluster_spark_local_ip_is_bound_and_advertised():
    address = choose_node_address(local_master=False, driver_host="driver", environ={"SPARK_LOCAL_IP": "10.9.9.9"})
    assert (address.bind_host, address.advertise_host) == ("10.9.9.9", "10.9.9.9")


def test_spark_local_hostname_is_advertised_and_its_address_bound():
    address = choose_node_address(local_master=False, driver_host=None, environ={"SPARK_LOCAL_HOSTNAME": "localhost"})
    assert address.advertise_host == "localhost"
    assert address.bind_host in {info[4][0] for info in socket.getaddrinfo("localhost", None)}


def test_without_spark_settings_the_interface_that_routes_to_the_driver_is_chosen():
    # The driver on loopback: the route to it leaves through loopback (a UDP connect sends nothing).
    address = choose_node_address(local_master=False, driver_host="127.0.0.1", environ={})
    assert (address.bind_host, address.advertise_host) == ("127.0.0.1", "127.0.0.1")
    assert "driver" in address.reason
    assert route_address("127.0.0.1") == "127.0.0.1"


def test_a_driver_host_without_a_route_falls_back_to_every_interface_and_the_host_name(caplog):
    address = choose_node_address(local_master=False, driver_host="no-such-host.invalid", environ={})
    assert (address.bind_host, address.advertise_host) == ("0.0.0.0", socket.gethostname())
    assert "no-such-host.invalid" in caplog.text


def test_a_driver_binds_loopback_for_a_local_master_and_the_address_routing_to_a_standalone_master(monkeypatch):
    # It bound 127.0.0.1 for every master: a standalone master's executors on other hosts never reached it.
    routes = []
    monkeypatch.setattr(network, "route_address", lambda host: routes.append(host) or "10.0.0.7")
    assert driver_address("local[2,4]", environ={}) == "127.0.0.1" and routes == []
    assert driver_address("spark://master-host:7077", environ={}) == "10.0.0.7"
    assert driver_address("spark://m1:7077,m2:7077", environ={}) == "10.0.0.7" and routes[-1] == "m1"  # HA: the first
    assert driver_address("spark://m1:7077", environ={"SPARK_LOCAL_IP": "10.0.0.8"}) == "10.0.0.8"  # the user's word
    assert driver_address("yarn", environ={}) is None and driver_address("k8s://https://api:6443", environ={}) is None
    with pytest.raises(TrainingError, match=r"SPARK_LOCAL_IP is 127.0.0.1, a loopback address, but the master "
                                            r"spark://m1:7077 is on another host.*Unset SPARK_LOCAL_IP \(the driver "
                                            r"then uses 10.0.0.7"):
        driver_address("spark://m1:7077", environ={"SPARK_LOCAL_IP": "127.0.0.1"})
    monkeypatch.setattr(network, "route_address", lambda host: "127.0.0.1")  # a master on this machine
    assert driver_address("spark://127.0.0.1:7077", environ={"SPARK_LOCAL_IP": "127.0.0.1"}) == "127.0.0.1"

    def no_route(host):
        raise OSError("no such host")

    monkeypatch.setattr(network, "route_address", no_route)
    assert driver_address("spark://nowhere:7077", environ={}) is None  # Spark says it, connecting


def test_given_hosts_win_over_every_guess_and_the_advertised_host_defaults_to_the_bound_one():
    given = choose_node_address(local_master=True, driver_host=None, bind_host="0.0.0.0", advertise_host="node-7.dc")
    assert (given.bind_host, given.advertise_host) == ("0.0.0.0", "node-7.dc")
    bound = choose_node_address(local_master=False, driver_host=None, bind_host="10.0.0.5",
                                environ={"SPARK_LOCAL_IP": "10.9.9.9"})
    assert (bound.bind_host, bound.advertise_host) == ("10.0.0.5", "10.0.0.5")
    advertised = choose_node_address(local_master=False, driver_host=None, advertise_host="public.example",
                                     environ={"SPARK_LOCAL_IP": "10.9.9.9"})
    assert (advertised.bind_host, advertised.advertise_host) == ("10.9.9.9", "public.example")


@pytest.mark.parametrize("changes, message", [
    (dict(bind_host="0.0.0.0"), "give advertise_host too"),
    (dict(advertise_host="0.0.0.0"), "no address a peer can connect to"),
    (dict(bind_host="tcp://10.0.0.1"), "bind_host must be a host name or an IP address"),
    (dict(advertise_host="my host"), "advertise_host must be"),
    (dict(port_range="40100-40000"), "port_range"),
    (dict(port_range="forty"), "port_range"),
])
def test_bad_network_settings_are_refused_naming_the_setting(changes, message):
    with pytest.raises(ValueError, match=message):
        TrainingSettings(**changes).validate()


def test_a_local_masters_nodes_need_a_port_each_of_the_port_range_and_a_clusters_are_not_counted_here():
    assert [local_master_threads(master) for master in ("local", "local[3]", "local[3,4]", "spark://h:7077", None)] == [
        1, 3, 3, None, 1]
    check_ports_for_nodes("40000-40002", 3, "local[3,4]")  # a port each
    check_ports_for_nodes(None, 3, "local[3]")  # any free port
    check_ports_for_nodes("40000", 8, "spark://h:7077")  # the nodes spread over the cluster's hosts
    with pytest.raises(ValueError, match=r"^port_range 40000-40001 holds 2 ports for 3 nodes: on the local master "
                                         r"local\[3\] every node runs on this host"):
        check_ports_for_nodes("40000-40001", 3, "local[3]")


def test_every_training_setting_reads_from_its_spark_conf_key_in_snake_or_camel_case():
    conf = {"spark.sparkdbn.advertise_host": "10.0.0.5", "spark.sparkdbn.portRange": "40000-40100",
            "spark.sparkdbn.epochs": '{"rbm0": 2, "finetune": 4}', "spark.sparkdbn.fanout": "3",
            "spark.sparkdbn.merge_alpha": "0.5", "spark.sparkdbn.shuffle": "false", "spark.sparkdbn.batchSize": "none",
            "spark.sparkdbn.early_stopping": "true", "spark.sparkdbn.mlflow_tracking_uri": "file:///tmp/ml",
            "spark.sparkdbn.storeRetryTimeoutS": "5", "spark.app.name": "ignored"}
    assert settings_from_spark_conf(conf, TrainingSettings) == {
        "advertise_host": "10.0.0.5", "port_range": "40000-40100", "epochs": {"rbm0": 2, "finetune": 4},
        "fanout": 3, "merge_alpha": 0.5, "shuffle": False, "batch_size": None, "early_stopping": True,
        "mlflow_tracking_uri": "file:///tmp/ml", "store_retry_timeout_s": 5.0}
    assert settings_from_spark_conf({"spark.sparkdbn.epochs": "7"}, TrainingSettings) == {"epochs": 7}
    every_field = {f"spark.sparkdbn.{field.name}" for field in dataclasses.fields(TrainingSettings)}
    readable = every_field - {"spark.sparkdbn.validation_data"}
    defaults = {key: json.dumps(getattr(TrainingSettings(), key[len("spark.sparkdbn."):])) for key in readable}
    for key, text in defaults.items():  # each field's default, written as text, reads back
        text = {"null": "none"}.get(text, text.strip('"'))
        assert key[len("spark.sparkdbn."):] in settings_from_spark_conf({key: text}, TrainingSettings), key


@pytest.mark.parametrize("key, value, message", [
    ("spark.sparkdbn.fanout", "three", r"spark.sparkdbn.fanout='three': expected int or none"),
    ("spark.sparkdbn.shuffle", "maybe", r"spark.sparkdbn.shuffle='maybe': expected a boolean"),
    ("spark.sparkdbn.epochs", "[1, 2]", r"spark.sparkdbn.epochs='\[1, 2\]': expected int or a JSON object"),
    ("spark.sparkdbn.advertize_host", "x", r"spark.sparkdbn.advertize_host: no such sparkdbn setting"),
    ("spark.sparkdbn.validation_data", "x", r"no such sparkdbn setting from conf"),
])
def test_a_bad_spark_conf_value_or_key_is_an_error_naming_the_key(key, value, message):
    with pytest.raises(SparkConfError, match=message):
        settings_from_spark_conf({key: value}, TrainingSettings)


def test_an_explicit_argument_wins_over_the_spark_conf_which_wins_over_the_default():
    conf = {"spark.sparkdbn.advertise_host": "10.0.0.5", "spark.sparkdbn.fanout": "3",
            "spark.sparkdbn.port_range": "40000-40010"}
    given = TrainingSettings(fanout=2)
    settings = apply_spark_conf(given, conf, explicit_fields(given, {"port_range"}))
    assert (settings.fanout, settings.advertise_host, settings.port_range) == (2, "10.0.0.5", None)
    with pytest.raises(SparkConfError, match=r"spark.sparkdbn.bind_host.*give advertise_host too"):
        apply_spark_conf(TrainingSettings(), {"spark.sparkdbn.bind_host": "0.0.0.0"}, set())


def test_the_cli_flags_and_config_keys_reach_the_training_settings(tmp_path):
    import rbm

    args = build_parser().parse_args(["train", "--bind-host", "0.0.0.0", "--advertise-host", "worker-3",
                                      "--port-range", "40000-40100"])
    options = {key: value for key, value in vars(args).items() if value is not None}
    settings = training_settings(options, rbm.DBN(hidden_layer_sizes=(4,)))
    assert (settings.bind_host, settings.advertise_host, settings.port_range) == ("0.0.0.0", "worker-3", "40000-40100")
    config = tmp_path / "job.json"
    config.write_text(json.dumps({"advertise-host": "10.0.0.9", "port_range": "41000-41010"}))
    settings = training_settings(load_config(str(config)), rbm.DBN(hidden_layer_sizes=(4,)))
    assert (settings.advertise_host, settings.port_range) == ("10.0.0.9", "41000-41010")


def test_the_node_config_carries_the_network_settings_and_the_fits_nodes_under_the_contract():
    assert CONTRACT_VERSION >= 5  # the fit's nodes came in version 5 (the network settings in 4)
    config = NodeConfig(run="r", fit_id="f", store_url="file:///s", store_retry_timeout_s=1.0, key=b"k" * 32, spec={},
                        feature_shape=(4,), classes=None, seed=0, fanout=None, merge_alpha=None, keep_versions=1,
                        anti_entropy_interval_s=1.0, peer_refresh_interval_s=1.0, flush_timeout_s=1.0,
                        local_master=False, driver_host="driver", bind_host="0.0.0.0", advertise_host="w1",
                        port_range="40000-40100", nodes=2)
    assert decode(encode(config), NodeConfig) == config


def test_the_driver_warns_once_per_phase_when_nearly_every_merge_came_by_listing():
    watch = ReachabilityWatch()
    heard = [{"node": "a", "merged_announced": 3, "merged_listed": 1, "endpoint": "tcp://10.0.0.3:1"}] * 2
    assert watch.end_epoch("rbm0", heard) is None
    listed = [{"node": "a", "merged_announced": 0, "merged_listed": 3, "endpoint": "tcp://10.0.0.3:1"},
              {"node": "b", "merged_announced": 0, "merged_listed": 3, "endpoint": "tcp://10.0.0.4:1"}]
    assert watch.end_epoch("rbm1", listed[:1]) is None  # too few merges to tell yet
    warning = watch.end_epoch("rbm1", listed[1:])
    assert "cannot reach each other's ports" in warning and "6 of 6" in warning
    for setting in ("advertise_host", "port_range", "firewall", "tcp://10.0.0.4:1"):
        assert setting in warning
    assert watch.end_epoch("rbm1", listed) is None  # once per phase
    assert watch.end_epoch("finetune", listed) is not None
    assert merges_by_node(listed + heard) == {"a": {"announced": 6, "listed": 5}, "b": {"announced": 0, "listed": 3}}


def test_merges_through_the_store_by_design_are_neither_announced_nor_listed_and_never_warn():
    # sync and sharing exchange through the store: their reports count no announcement and no listing
    # (counted as listings, every epoch of theirs read as nodes that cannot reach each other).
    through_store = [{"node": name, "merged_announced": 0, "merged_listed": 0, "endpoint": "tcp://10.0.0.3:1"}
                     for name in "ab"] * 4
    watch = ReachabilityWatch()
    assert all(watch.end_epoch(phase, through_store) is None for phase in ("rbm0", "rbm0", "finetune"))
    summary = {"run": "r", "phase": "rbm0", "epoch": 0, "loss": 0.1, "samples_per_s": 10.0, "merges": 8,
               "merges_by_node": merges_by_node(through_store), "staleness_s": None, "nodes": ["a", "b"]}
    assert "8 merges, staleness" in summary_line(summary, 3)
    summary["merges_by_node"] = merges_by_node([{"node": "a", "merged_announced": 5, "merged_listed": 3}])
    assert "8 merges (5 by announcement, 3 by listing (a 5/3))" in summary_line(summary, 3)
    one = {**summary, "merges": 1, "merges_by_node": {}, "nodes": ["a"], "nodes_merging": 1}
    assert "1 merge, staleness -, 1 node, learning rate x1.00 for 1 node merging" in summary_line(one, 3)
