#include "examples/trip-booking/trip_participants.hpp"

#include <thread>

namespace trip {

namespace {

using sagaflow::Command;
using sagaflow::StepReply;
using sagaflow::Transaction;

std::string Text(const nlohmann::json& data, const char* key) {
    const auto it = data.find(key);
    return it != data.end() && it->is_string() ? it->get<std::string>() : "";
}

void Hotel(sagaflow::Participant& p, std::chrono::milliseconds slow) {
    p.Setup([](Transaction& tx) {
        tx.Execute(
            "CREATE TABLE IF NOT EXISTS room_hold ("
            "  trip_id  text PRIMARY KEY,"
            "  saga_id  uuid NOT NULL,"
            "  hotel_id text NOT NULL,"
            "  nights   int  NOT NULL,"
            "  status   text NOT NULL CHECK (status IN ('held', 'released', 'confirmed')))");
    });
    p.OnAction("ReserveRoom.v1", [slow](Transaction& tx, const Command& c) {
        const std::string hotel = Text(c.data, "hotelId");
        if (hotel.rfind("full-", 0) == 0) return StepReply::Failure("no room left at " + hotel);
        if (hotel.rfind("slow-", 0) == 0) std::this_thread::sleep_for(slow);
        tx.Execute(
            "INSERT INTO room_hold (trip_id, saga_id, hotel_id, nights, status) VALUES ($1, $2::uuid, $3, "
            "$4::int, 'held')",
            {Text(c.data, "tripId"), c.saga_id, hotel, c.data.value("nights", nlohmann::json(1)).dump()});
        return StepReply::Success({{"holdId", "room-" + Text(c.data, "tripId")}});
    });
    p.OnCompensation("ReleaseRoom.v1", [](Transaction& tx, const Command& c) {
        tx.Execute("UPDATE room_hold SET status = 'released' WHERE trip_id = $1 AND status = 'held'",
                   {Text(c.data, "tripId")});
        return StepReply::Success();
    });
    p.OnAction("ConfirmRoom.v1", [](Transaction& tx, const Command& c) {
        const std::string hold = Text(c.data, "holdId");
        const auto updated = tx.Execute(
            "UPDATE room_hold SET status = 'confirmed' WHERE 'room-' || trip_id = $1 AND status = 'held'", {hold});
        if (updated == 0) return StepReply::Retry("no held room " + hold);
        return StepReply::Success();
    });
}

void Airline(sagaflow::Participant& p, std::chrono::milliseconds slow) {
    p.Setup([](Transaction& tx) {
        tx.Execute(
            "CREATE TABLE IF NOT EXISTS seat_hold ("
            "  hold_id  text PRIMARY KEY,"
            "  saga_id  uuid NOT NULL UNIQUE,"
            "  flights  jsonb NOT NULL,"
            "  status   text NOT NULL CHECK (status IN ('held', 'released', 'confirmed')))");
    });
    p.OnAction("ReserveSeats.v1", [slow](Transaction& tx, const Command& c) {
        const auto flights = c.data.value("flights", nlohmann::json::array());
        for (const auto& f : flights) {
            const std::string number = Text(f, "flightNo");
            if (number == "XX000") return StepReply::Failure("flight " + number + " is full");
            if (number.rfind("SLOW", 0) == 0) std::this_thread::sleep_for(slow);
        }
        const std::string hold = "seats-" + Text(c.data, "tripId");
        tx.Execute("INSERT INTO seat_hold (hold_id, saga_id, flights, status) VALUES ($1, $2::uuid, $3::jsonb, 'held')",
                   {hold, c.saga_id, flights.dump()});
        return StepReply::Success({{"holdId", hold}});
    });
    // The compensation's holdId is the action's reply, absent when the action's outcome is unknown
    // (it timed out or was stopped): the saga id finds the hold then.
    p.OnCompensation("ReleaseSeats.v1", [](Transaction& tx, const Command& c) {
        tx.Execute(
            "UPDATE seat_hold SET status = 'released' WHERE (hold_id = $1 OR saga_id = $2::uuid) AND status = "
            "'held'",
            {Text(c.data, "holdId"), c.saga_id});
        return StepReply::Success();
    });
    p.OnAction("ConfirmSeats.v1", [](Transaction& tx, const Command& c) {
        const auto updated =
            tx.Execute("UPDATE seat_hold SET status = 'confirmed' WHERE hold_id = $1 AND status = 'held'",
                       {Text(c.data, "holdId")});
        if (updated == 0) return StepReply::Retry("no held seats " + Text(c.data, "holdId"));
        return StepReply::Success();
    });
}

void Payment(sagaflow::Participant& p) {
    p.Setup([](Transaction& tx) {
        tx.Execute(
            "CREATE TABLE IF NOT EXISTS card_charge ("
            "  trip_id text PRIMARY KEY,"
            "  saga_id uuid NOT NULL,"
            "  amount  numeric(12,2) NOT NULL)");
    });
    p.OnAction("ChargeCard.v2", [](Transaction& tx, const Command& c) {
        const std::string amount = Text(c.data, "amount");
        const auto over = tx.Query("SELECT $1::numeric > 5000", {amount});
        if (over.at(0).at(0) == "t") return StepReply::Failure("the card was declined for " + amount);
        tx.Execute("INSERT INTO card_charge (trip_id, saga_id, amount) VALUES ($1, $2::uuid, $3::numeric)",
                   {Text(c.data, "tripId"), c.saga_id, amount});
        return StepReply::Success({{"chargeId", "charge-" + Text(c.data, "tripId")}});
    });
}

void Insurance(sagaflow::Participant& p) {
    p.Setup([](Transaction& tx) {
        tx.Execute(
            "CREATE TABLE IF NOT EXISTS travel_policy ("
            "  policy_id text PRIMARY KEY,"
            "  saga_id   uuid NOT NULL,"
            "  status    text NOT NULL CHECK (status IN ('active', 'cancelled')))");
    });
    p.OnAction("BuyTravelPolicy.v1", [](Transaction& tx, const Command& c) {
        if (c.data.value("nights", 0) > 30) return StepReply::Failure("stays over 30 nights are not insured");
        const std::string policy = "policy-" + Text(c.data, "tripId");
        tx.Execute("INSERT INTO travel_policy (policy_id, saga_id, status) VALUES ($1, $2::uuid, 'active')",
                   {policy, c.saga_id});
        return StepReply::Success({{"policyId", policy}});
    });
    p.OnCompensation("CancelTravelPolicy.v1", [](Transaction& tx, const Command& c) {
        tx.Execute("UPDATE travel_policy SET status = 'cancelled' WHERE saga_id = $1::uuid", {c.saga_id});
        return StepReply::Success();
    });
}

void Notify(sagaflow::Participant& p) {
    p.Setup([](Transaction& tx) {
        tx.Execute(
            "CREATE TABLE IF NOT EXISTS itinerary ("
            "  trip_id text PRIMARY KEY,"
            "  saga_id uuid NOT NULL,"
            "  sent_to text NOT NULL,"
            "  insured boolean NOT NULL)");
    });
    p.OnAction("SendItinerary.v1", [](Transaction& tx, const Command& c) {
        tx.Execute("INSERT INTO itinerary (trip_id, saga_id, sent_to, insured) VALUES ($1, $2::uuid, $3, $4::boolean)",
                   {Text(c.data, "tripId"), c.saga_id, Text(c.data, "to"), c.data.value("insured", false) ? "t" : "f"});
        return StepReply::Success();
    });
}

}  // namespace

std::unique_ptr<sagaflow::Participant> Make(const std::string& role,
                                            sagaflow::ParticipantConfig base,
                                            std::chrono::milliseconds slow) {
    if (base.name.empty()) base.name = role;
    base.schema = "trip_" + role;
    auto participant = std::make_unique<sagaflow::Participant>(base);
    if (role == "hotel") Hotel(*participant, slow);
    if (role == "airline") Airline(*participant, slow);
    if (role == "payment") Payment(*participant);
    if (role == "insurance") Insurance(*participant);
    if (role == "notify") Notify(*participant);
    return participant;
}

std::string WithParticipantSuffix(std::string yaml, const std::string& suffix) {
    for (const auto& role : kParticipants) {
        const std::string from = "participant: " + role + "\n";
        const std::string to = "participant: " + role + "-" + suffix + "\n";
        for (std::size_t at = 0; (at = yaml.find(from, at)) != std::string::npos; at += to.size()) {
            yaml.replace(at, from.size(), to);
        }
    }
    return yaml;
}

}  // namespace trip
